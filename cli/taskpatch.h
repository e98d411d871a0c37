/* SPDX-License-Identifier: MIT */
#pragma once

/* The taskpatch subcommands, one file each (taskpatch-<verb>.c). Each returns an exit code. */

int verb_hash(int argc, char *argv[]);
int verb_caps(int argc, char *argv[]);
