/* SPDX-License-Identifier: MIT */
/*
 * The revocation list a channel carries (taskpatchd-fetch.h): fetched on the poll's
 * handle once the channel verified, before the channel is taken. A list that cannot be had
 * or is refused fails the poll at this mirror: the channel is not followed without it, so a
 * mirror that drops the list cannot make a device take what it revokes.
 */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sha256.h"
#include "taskpatchd-fetch.h"
#include "taskpatchd-log.h"

static void on_revocations_done(CurlGlue *g, CURL *easy, CURLcode result, void *userdata) {
        Fetcher *f = userdata;
        _cleanup_(channel_freep) Channel *c = TAKE_PTR(f->pending);
        _cleanup_free_ char *url = TAKE_PTR(f->pending_url);
        const ChannelRevocations *rv = &c->revocations;
        const SourceHost *host = f->models[0].host;
        _cleanup_free_ char *where = http_resolve(url, rv->path);
        char why[2 * TP_ERROR_MAX];
        uint8_t d[SHA256_DIGEST_SIZE];
        long status = 0;
        TpError err = {};
        int r;
        (void) g;

        (void) curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
        if (result != CURLE_OK || status != 200) {
                http_describe(f->config, result, status, where ? where : rv->path, why, sizeof(why));
                fetch_poll_failed(f, why);
                return;
        }
        sha256_digest(f->body.len ? f->body.data : (const uint8_t *) "", f->body.len, d);
        if (f->body.len != rv->size || memcmp(d, rv->sha256, SHA256_DIGEST_SIZE) != 0) {
                snprintf(why, sizeof(why), "%s: %zu bytes that do not match the channel's revocations (size %" PRIu64
                         " and SHA-256): not following the channel without its list", where ? where : rv->path,
                         f->body.len, rv->size);
                fetch_poll_failed(f, why);
                return;
        }
        r = host->take_revocations(host, f->body.data, f->body.len, where ? where : rv->path, &err);
        if (r < 0) {
                snprintf(why, sizeof(why), "%s (not following the channel without its list)", tp_error_message(&err, r));
                fetch_poll_failed(f, why);
                return;
        }
        /* The list may revoke the channel's own signer: the channel is checked again under it. */
        if (r > 0 && (r = fetch_verify_channel(f, c, url, &err)) < 0) {
                fetch_poll_failed(f, tp_error_message(&err, r));
                return;
        }
        (void) fetcher_take_channel(f, TAKE_PTR(c), url, &err);        /* reports its own errors */
}

bool fetch_revocations_start(Fetcher *f, Channel **c, const char *url) {
        const SourceHost *host = f->models[0].host;
        const ChannelRevocations *rv = &(*c)->revocations;

        const Revocations *held = host->revocations(host);
        uint64_t have = held ? held->version : 0;

        if (!rv->set || rv->version <= have)
                return false;
        _cleanup_free_ char *where = http_resolve(url, rv->path);
        if (!where || !(f->pending_url = strdup(url))) {
                fetch_poll_failed(f, "cannot fetch the channel's revocation list: out of memory");
                return true;
        }
        f->pending = TAKE_PTR(*c);
        log_info("the channel carries revocation list version %" PRIu64 " (this device holds %" PRIu64 "): "
                 "fetching %s", rv->version, have, where);
        if (http_setup_get(f->easy, f->config, where, NULL, CHANNEL_TIMEOUT_SEC, &f->body) < 0 ||
            curl_glue_add(f->glue, f->easy, on_revocations_done, f) < 0) {
                f->pending = channel_free(f->pending);
                free(TAKE_PTR(f->pending_url));
                fetch_poll_failed(f, "cannot start the revocation list's transfer (out of memory?)");
        }
        return true;
}
