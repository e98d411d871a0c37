/* SPDX-License-Identifier: MIT */
#pragma once

/* The taskpatch subcommands, one file each (taskpatch-<verb>.c). Each returns an exit code. */

int verb_hash(int argc, char *argv[]);
int verb_caps(int argc, char *argv[]);
int verb_create(int argc, char *argv[]);
int verb_inspect(int argc, char *argv[]);
int verb_verify(int argc, char *argv[]);
int verb_apply(int argc, char *argv[]);
int verb_diff(int argc, char *argv[]);
