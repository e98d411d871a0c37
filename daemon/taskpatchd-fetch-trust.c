/* SPDX-License-Identifier: MIT */
/*
 * The trust files a channel carries (taskpatchd-fetch.h: fetch_channel_continue()): its
 * trust root and its revocation list, each fetched on the poll's handle before the channel
 * is taken. A file that cannot be had or is refused fails the poll at this mirror: the
 * channel is not followed without it, so a mirror that drops a list cannot make a device
 * take what it revokes.
 */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sha256.h"
#include "taskpatchd-fetch.h"
#include "taskpatchd-log.h"

static const char *file_noun(bool root) {
        return root ? "trust root" : "revocation list";
}

static void on_trust_file_done(CurlGlue *g, CURL *easy, CURLcode result, void *userdata) {
        Fetcher *f = userdata;
        _cleanup_(channel_freep) Channel *c = TAKE_PTR(f->pending);
        _cleanup_free_ char *url = TAKE_PTR(f->pending_url);
        bool root = f->pending_root;
        const ChannelTrustFile *rv = root ? &c->root : &c->revocations;
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
                snprintf(why, sizeof(why), "%s: %zu bytes that do not match the channel's %s (size %" PRIu64
                         " and SHA-256): not following the channel without it", where ? where : rv->path,
                         f->body.len, root ? "root" : "revocations", rv->size);
                fetch_poll_failed(f, why);
                return;
        }
        r = host->take_trust(host, f->body.data, f->body.len, where ? where : rv->path, &err);
        if (r < 0) {
                snprintf(why, sizeof(why), "%s (not following the channel without its %s)", tp_error_message(&err, r),
                         file_noun(root));
                fetch_poll_failed(f, why);
                return;
        }
        if (root) {
                fetch_channel_continue(f, TAKE_PTR(c), url, true);
                return;
        }
        /* The list may revoke the channel's own signer: the channel is checked again under it. */
        if (r > 0 && (r = fetch_verify_channel(f, c, url, &err)) < 0) {
                fetch_poll_failed(f, tp_error_message(&err, r));
                return;
        }
        (void) fetcher_take_channel(f, TAKE_PTR(c), url, &err);        /* reports its own errors */
}

/* Fetch the trust file @root names in @c when it is newer than the device's: true when started (it owns @c then). */
static bool trust_file_start(Fetcher *f, Channel **c, const char *url, bool root) {
        const SourceHost *host = f->models[0].host;
        const ChannelTrustFile *rv = root ? &(*c)->root : &(*c)->revocations;
        const TrustRoot *held_root = host->trust_root(host);
        const Revocations *held_list = host->revocations(host);
        uint64_t have = root ? (held_root ? held_root->version : 0) : (held_list ? held_list->version : 0);

        if (!rv->set || rv->version <= have)
                return false;
        _cleanup_free_ char *where = http_resolve(url, rv->path);
        if (!where || !(f->pending_url = strdup(url))) {
                channel_free(*c);
                *c = NULL;
                fetch_poll_failed(f, "cannot fetch the channel's trust files: out of memory");
                return true;
        }
        f->pending = TAKE_PTR(*c);
        f->pending_root = root;
        log_info("the channel carries %s version %" PRIu64 " (this device holds %" PRIu64 "): fetching %s",
                 file_noun(root), rv->version, have, where);
        if (http_setup_get(f->easy, f->config, where, NULL, CHANNEL_TIMEOUT_SEC, &f->body) < 0 ||
            curl_glue_add(f->glue, f->easy, on_trust_file_done, f) < 0) {
                f->pending = channel_free(f->pending);
                free(TAKE_PTR(f->pending_url));
                fetch_poll_failed(f, "cannot start the transfer of the channel's trust file (out of memory?)");
        }
        return true;
}

void fetch_channel_continue(Fetcher *f, Channel *channel, const char *url, bool root_done) {
        _cleanup_(channel_freep) Channel *c = channel;
        TpError err = {};
        int r;

        if (!root_done && trust_file_start(f, &c, url, true))
                return;                 /* continued once the root is taken */
        if ((r = fetch_verify_channel(f, c, url, &err)) < 0) {
                fetch_poll_failed(f, tp_error_message(&err, r));
                return;
        }
        if (trust_file_start(f, &c, url, false))
                return;                 /* taken once its revocation list is */
        (void) fetcher_take_channel(f, TAKE_PTR(c), url, &err);        /* reports its own errors */
}
