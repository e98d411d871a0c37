/* SPDX-License-Identifier: MIT */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "channel.h"

/* The taskpatch subcommands, one file each (taskpatch-<verb>.c). Each returns an exit code. */

int verb_hash(int argc, char *argv[]);
int verb_caps(int argc, char *argv[]);
int verb_create(int argc, char *argv[]);
int verb_inspect(int argc, char *argv[]);
int verb_verify(int argc, char *argv[]);
int verb_apply(int argc, char *argv[]);
int verb_diff(int argc, char *argv[]);
int verb_publish(int argc, char *argv[]);

/* Channel files (taskpatch-channel.c), for inspect, verify and publish. */
bool cli_is_channel(const char *path);
json_t *channel_to_json(const Channel *c);
void channel_print(const Channel *c);
int channel_inspect(const char *path, bool json);
int channel_verify_files(const char *path, const char *ca_path);
