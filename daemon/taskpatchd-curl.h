/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * libcurl's multi-socket interface driven by sd-event: curl tells us which
 * sockets to watch and when to time out; the event loop tells curl when a
 * socket is ready. Transfers never block the loop. One glue, made by
 * taskpatchd.c, carries every update source's transfers (the channel fetcher,
 * the hawkBit client); the trial's health URL has its own.
 */

#include <curl/curl.h>
#include <systemd/sd-event.h>

#include "macro.h"

typedef struct CurlGlue CurlGlue;

/* Called from the event loop when @easy finished; @result is its CURLcode. The glue has removed it. */
typedef void (*CurlDone)(CurlGlue *g, CURL *easy, CURLcode result, void *userdata);

_warn_unused_result_ int curl_glue_new(sd_event *e, CurlGlue **ret);
/* Removes (without calling back) and cleans up every transfer still running. NULL-safe. */
CurlGlue *curl_glue_free(CurlGlue *g);
DEFINE_POINTER_CLEANUP(CurlGlue, curl_glue_free)

/* Start @easy (configured by the caller); @done runs once when it ends. The caller keeps owning @easy. */
_warn_unused_result_ int curl_glue_add(CurlGlue *g, CURL *easy, CurlDone done, void *userdata);
/* Stop @easy without calling back. */
void curl_glue_remove(CurlGlue *g, CURL *easy);
