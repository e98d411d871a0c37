/* SPDX-License-Identifier: MIT */
/* tpctl status, tpctl list: what the daemon holds, for a person (or as JSON). */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "parse.h"
#include "tpctl.h"

#define LABEL "%-12s"

static void print_active(json_t *a) {
        char task[160];

        if (!json_is_object(a)) {
                printf(LABEL "none\n", "Active:");
                return;
        }
        printf(LABEL "%s in slot %s\n", "Active:", format_task(a, task, sizeof(task)) ?: "?",
               get_str(a, "slot") ?: "?");
        if (get_str(a, "sha256"))
                printf(LABEL "sha256 %s\n", "", get_str(a, "sha256"));
}

static void print_slots(json_t *slots) {
        for (void *it = json_object_iter(slots); it; it = json_object_iter_next(slots, it)) {
                const char *name = json_object_iter_key(it);
                json_t *slot = json_object_iter_value(it);
                char label[32], task[160];

                snprintf(label, sizeof(label), "Slot %s:", name);
                printf(LABEL "%s", label, get_str(slot, "state") ?: "?");
                if (json_is_true(json_object_get(slot, "active")))
                        printf(", active");
                if (format_task(slot, task, sizeof(task)))
                        printf(", %s", task);
                if (json_is_true(json_object_get(slot, "relocated")))
                        printf(" (relocated: its own layout, %" JSON_INTEGER_FORMAT " bytes)",
                               json_integer_value(json_object_get(slot, "size")));
                if (get_str(slot, "sha256"))
                        printf(", sha256 %s", get_str(slot, "sha256"));
                printf("\n");
        }
}

static void print_base(json_t *base) {
        char size[32];
        uint64_t v;

        if (!json_is_object(base))
                return;
        json_t *files = json_object_get(base, "files");
        printf(LABEL "%s", "Base:", get_str(base, "kind") ?: "?");
        if (json_is_array(files))
                printf(", a directory of %zu file%s", json_array_size(files), json_array_size(files) == 1 ? "" : "s");
        if (get_u64(base, "size", &v))
                printf(", %s", format_bytes(v, size, sizeof(size)));
        if (get_str(base, "sha256"))
                printf(", %s %s", json_is_array(files) ? "set digest" : "sha256", get_str(base, "sha256"));
        printf("\n");
        /* The files a slot directory holds, as the service finds them under model_path/. */
        size_t n = json_array_size(files), shown = n > 12 ? 10 : n;
        for (size_t i = 0; i < shown; i++) {
                json_t *f = json_array_get(files, i);
                printf(LABEL "%s (%s)\n", "", get_str(f, "path") ?: "?",
                       get_u64(f, "size", &v) ? format_bytes(v, size, sizeof(size)) : "?");
        }
        if (shown < n)
                printf(LABEL "... and %zu more (tpctl --json status lists them all)\n", "", n - shown);
}

static void print_tasks(json_t *tasks) {
        if (!json_is_array(tasks))
                return;
        printf(LABEL, "Installed:");
        if (json_array_size(tasks) == 0)
                printf("none");
        for (size_t i = 0; i < json_array_size(tasks); i++) {
                char task[160];
                printf("%s%s", i > 0 ? ", " : "", format_task(json_array_get(tasks, i), task, sizeof(task)) ?: "?");
        }
        printf("\n");
}

/* The revoked bundles (never used), the model a revoked signer made, the revocation list held. */
static void print_revoked(json_t *s) {
        json_t *revoked = json_object_get(s, "revoked"), *trust = json_object_get(s, "trust");
        json_t *rl = json_object_get(trust, "revocations"), *root = json_object_get(trust, "root");
        uint64_t v = 0, n = 0;

        for (size_t i = 0; i < json_array_size(revoked); i++) {
                json_t *e = json_array_get(revoked, i);
                char task[160];
                printf(LABEL "%s: %s\n", i == 0 ? "Revoked:" : "", format_task(e, task, sizeof(task)) ?: "?",
                       get_str(e, "why") ?: "?");
        }
        if (get_str(trust, "revoked_active"))
                printf(LABEL "%s: it is replaced through a trial\n", "Replacing:", get_str(trust, "revoked_active"));
        if (json_is_object(rl) && get_u64(rl, "version", &v) && get_u64(rl, "entries", &n))
                printf(LABEL "revocation list version %" PRIu64 " (%" PRIu64 " entries, created %s)%s%s\n", "Trust:", v,
                       n, get_str(rl, "created") ?: "?", get_str(trust, "crl") ? "; CRLs from " : "",
                       get_str(trust, "crl") ?: "");
        else if (get_str(trust, "crl"))
                printf(LABEL "CRLs from %s\n", "Trust:", get_str(trust, "crl"));
        if (json_is_object(root) && get_u64(root, "version", &v))
                printf(LABEL "trust root version %" PRIu64 " (expires %s%s)\n", "Root:", v, get_str(root, "expires") ?: "?",
                       json_is_true(json_object_get(root, "expired")) ? ": EXPIRED, a newer root is needed" : "");
}

static void print_trial(json_t *trial) {
        char task[160];
        int64_t deadline;
        uint64_t timeout;

        if (!json_is_object(trial)) {
                printf(LABEL "none\n", "Trial:");
                return;
        }
        printf(LABEL "%s%s in slot %s: ", "Trial:", format_task(trial, task, sizeof(task)) ?: "?",
               json_is_object(json_object_get(trial, "new_base")) ? " (a new base)" : "",
               get_str(trial, "slot") ?: "?");
        if (parse_iso8601(get_str(trial, "deadline"), &deadline) >= 0) {
                int64_t left = deadline - (int64_t) clock_wall();
                if (left >= 0)
                        printf("%" PRId64 " s left to confirm with 'tpctl mark-good' (deadline %s)\n", left,
                               get_str(trial, "deadline"));
                else
                        printf("deadline %s passed: rolling back\n", get_str(trial, "deadline"));
        } else if (get_u64(trial, "timeout", &timeout)) {
                printf("confirm with 'tpctl mark-good' within %" PRIu64 " s of its start\n", timeout);
        } else {
                printf("confirm with 'tpctl mark-good'\n");
        }
}

static void print_operation(json_t *op) {
        char done_s[32], total_s[32];
        uint64_t done, total;

        if (!json_is_object(op)) {
                printf(LABEL "none\n", "Operation:");
                return;
        }
        printf(LABEL "%s", "Operation:", get_str(op, "cmd") ?: "?");
        if (get_str(op, "phase"))
                printf(": %s", get_str(op, "phase"));
        if (get_u64(op, "done", &done) && get_u64(op, "total", &total) && total > 0)
                printf(" %d%% (%s of %s)", done >= total ? 100 : (int) ((double) done * 100.0 / (double) total),
                       format_bytes(done, done_s, sizeof(done_s)), format_bytes(total, total_s, sizeof(total_s)));
        if (get_str(op, "transaction"))
                printf(", transaction %s", get_str(op, "transaction"));
        printf("\n");
}

static void print_counters(json_t *c) {
        static const struct {
                const char *key, *label;
        } bytes[] = {
                { "slot_bytes_written", "slots" },
                { "undo_bytes_written", "undo records" },
                { "state_bytes_written", "state files" },
        };
        char b[32];
        uint64_t v;

        if (!json_is_object(c))
                return;
        printf(LABEL "%" PRIu64 " switches", "Counters:", get_u64(c, "switches", &v) ? v : 0);
        for (size_t i = 0; i < ELEMENTSOF(bytes); i++)
                if (get_u64(c, bytes[i].key, &v))
                        printf("%s%s %s", i == 0 ? "; written to " : ", ", bytes[i].label, format_bytes(v, b, sizeof(b)));
        if (get_u64(c, "last_switch_slot_bytes", &v))
                printf("; last switch wrote %s", format_bytes(v, b, sizeof(b)));
        printf(" (since the daemon started)\n");
}

/* The fleet channel, when one is configured: where from, what it wants, how the last update went. */
static void print_channel(json_t *c) {
        json_t *dl = json_object_get(c, "download"), *up = json_object_get(c, "update");
        json_t *urls = json_object_get(c, "urls");
        char done_s[32], total_s[32];
        uint64_t v, done, total;

        if (!json_is_object(c))
                return;
        printf(LABEL "%s", "Channel:", get_str(c, "name") ?: "(none accepted yet)");
        if (get_u64(c, "serial", &v))
                printf(" serial %" PRIu64, v);
        printf(" from %s (%s)", json_string_value(json_array_get(urls, 0)) ?: "?", get_str(c, "state") ?: "?");
        printf("; desired %s\n", get_str(c, "desired") ?: "none");
        if (get_str(c, "last_poll"))
                printf(LABEL "last poll %s, HTTP %" PRIu64 ", %" PRIu64 " bytes\n", "", get_str(c, "last_poll"),
                       get_u64(c, "last_poll_http_status", &v) ? v : 0, get_u64(c, "last_poll_bytes", &done) ? done : 0);
        if (get_str(c, "decision"))
                printf(LABEL "%s\n", "", get_str(c, "decision"));
        else if (json_is_true(json_object_get(c, "pinned")))
                printf(LABEL "pinned by a technician's switch until the channel's serial changes\n", "");
        if (json_is_object(dl) && get_u64(dl, "done", &done) && get_u64(dl, "total", &total) && total > 0)
                printf(LABEL "downloading %s v%" PRIu64 ": %d%% (%s of %s)\n", "", get_str(dl, "task") ?: "?",
                       get_u64(dl, "version", &v) ? v : 0,
                       done >= total ? 100 : (int) ((double) done * 100.0 / (double) total),
                       format_bytes(done, done_s, sizeof(done_s)), format_bytes(total, total_s, sizeof(total_s)));
        if (json_is_object(up)) {
                const char *result = get_str(up, "result") ?: "?";
                printf(LABEL "update %s v%" PRIu64 ": %s", "", get_str(up, "task") ?: "?",
                       get_u64(up, "version", &v) ? v : 0,
                       strcmp(result, "pending") == 0 ? "pending until its trial commits" : result);
                if (get_str(up, "reason"))
                        printf(" (%s)", get_str(up, "reason"));
                printf("\n");
        }
        if (get_str(c, "last_error"))
                printf(LABEL "last error: %s\n", "", get_str(c, "last_error"));
}

/*
 * "Last event: rolled-back 2026-11-29T15:02:00Z (health check failed: exit status 3)" from
 * last_event; from a daemon without it, "Last error:" from last_error.
 */
static void print_last(json_t *s) {
        json_t *ev = json_object_get(s, "last_event"), *err = json_object_get(s, "last_error");

        if (json_is_object(ev)) {
                const char *code = get_str(ev, "code"), *reason = get_str(ev, "reason");

                printf(LABEL "%s", "Last event:", get_str(ev, "kind") ?: "?");
                if (get_str(ev, "time"))
                        printf(" %s", get_str(ev, "time"));
                if (code || reason)
                        printf(" (%s%s%s)", code ?: "", code && reason ? ": " : "", reason ?: "");
                printf("\n");
        } else if (json_is_string(err)) {
                printf(LABEL "%s\n", "Last error:", json_string_value(err));
        } else if (json_is_object(err)) {
                printf(LABEL "%s (%s)\n", "Last error:", get_str(err, "message") ?: "?", get_str(err, "code") ?: "?");
        }
}

/* "== model NAME ==" before a model's section (a blank line before all but the first). */
static void print_model_heading(json_t *models, const char *name) {
        bool first = name == json_object_iter_key(json_object_iter(models));
        printf("%s== model %s ==\n", first ? "" : "\n", task_name_valid(name) ? name : "(a bad name)");
}

static void print_status(json_t *s) {
        const char *state = get_str(s, "state");

        json_sanitize(s);
        printf(LABEL "%s", "State:", state ?: "?");
        if (state && strcmp(state, "trial-installing") == 0)
                printf(" (an install runs while a task is on trial)");
        printf("\n");
        if (get_str(s, "model_path"))
                printf(LABEL "%s\n", "Model:", get_str(s, "model_path"));
        print_active(json_object_get(s, "active"));
        print_slots(json_object_get(s, "slots"));
        print_base(json_object_get(s, "base"));
        print_tasks(json_object_get(s, "tasks"));
        print_revoked(s);
        print_trial(json_object_get(s, "trial"));
        if (json_is_true(json_object_get(s, "reprovision")))
                printf(LABEL "the other slot still holds the old base: it is re-provisioned from the active one\n",
                       "Base change:");
        print_operation(json_object_get(s, "operation"));
        print_counters(json_object_get(s, "counters"));
        print_channel(json_object_get(s, "channel"));
        print_last(s);
        if (get_str(s, "version"))
                printf(LABEL "taskpatchd %s\n", "Daemon:", get_str(s, "version"));
}

int cmd_status(Tpctl *t, int argc, char *argv[]) {
        _cleanup_(json_decrefp) json_t *req = NULL, *resp = NULL;
        int ex;

        ex = tpctl_parse_options(t, "status", argc, argv);
        if (ex != TPCTL_GO_ON)
                return ex;
        req = json_pack("{s:s}", "cmd", "status");
        if (!req)
                return tpctl_fail(TPCTL_FAILURE_INTERNAL, "out of memory");
        ex = tpctl_simple_call(t, req, &resp);
        if (ex != TPCTL_EXIT_OK || t->json)
                return ex;
        /* A device of several models answers for each: one section per model. */
        json_t *models = json_object_get(resp, "models"), *s;
        const char *name;
        if (!json_is_object(models)) {
                print_status(resp);
                return ex;
        }
        json_object_foreach(models, name, s) {
                print_model_heading(models, name);
                json_object_del(s, "version");          /* said once, at the end */
                print_status(s);
        }
        if (get_str(resp, "version"))
                printf("\n" LABEL "taskpatchd %s\n", "Daemon:", get_str(resp, "version"));
        return ex;
}

/* The signer as a column: its CN when the field is a DN holding one ("CN=ci-signer, O=Example"), else the field. */
static const char *signer_name(const char *signer, char *buf, size_t n) {
        const char *cn = NULL;

        if (!signer || !signer[0])
                return "-";
        for (const char *p = signer; *p; p++) {
                if (strncmp(p, "CN=", 3) == 0 && (p == signer || p[-1] == ' ' || p[-1] == ',')) {
                        cn = p + 3;
                        break;
                }
                if (*p == '\\' && p[1])
                        p++;    /* an escaped character is never a separator */
        }
        if (!cn) {
                snprintf(buf, n, "%s", signer);
                return buf;
        }
        /* The value ends at the next unescaped ',' (or '+' of a multi-valued RDN). */
        size_t k = 0;
        for (const char *p = cn; *p && *p != ',' && *p != '+' && k + 1 < n; p++) {
                if (*p == '\\' && p[1])
                        p++;
                buf[k++] = *p;
        }
        buf[k] = '\0';
        return k > 0 ? buf : "-";
}

static size_t max_size(size_t a, size_t b) {
        return a > b ? a : b;
}

#define SIGNER_MAX 24   /* characters of the SIGNER column; longer ones end in "..." */

/* @s left-aligned in @width characters (printf pads bytes, not characters). */
static void print_cell(const char *s, size_t width) {
        size_t n = utf8_width(s);

        printf("%s%*s", s, n < width ? (int) (width - n) : 0, "");
}

typedef struct ListRow {
        char task[128], version[24], slot[16], size[32], signer[SIGNER_MAX * 4 + 4];
        const char *sha256;
        bool active;
} ListRow;

static void list_row(json_t *e, ListRow *r) {
        char signer[256];
        uint64_t v;

        *r = (ListRow) { .active = json_is_true(json_object_get(e, "active")), .sha256 = get_str(e, "sha256") };
        char task[TASK_NAME_MAX + 8];
        /* A base bundle's line is marked: switching to it replaces the base. */
        bool base = get_str(e, "role") && strcmp(get_str(e, "role"), "base") == 0;
        snprintf(task, sizeof(task), "%s%s", get_str(e, "task") ?: "-", base ? " (base)" : "");
        format_truncate(task, 40, r->task, sizeof(r->task));
        snprintf(r->version, sizeof(r->version), "-");
        if (get_u64(e, "version", &v))
                snprintf(r->version, sizeof(r->version), "%" PRIu64, v);
        format_truncate(get_str(e, "slot") ?: "-", 4, r->slot, sizeof(r->slot));
        snprintf(r->size, sizeof(r->size), "-");
        if (get_u64(e, "bundle_size", &v) || get_u64(e, "size", &v))
                format_bytes(v, r->size, sizeof(r->size));
        format_truncate(signer_name(get_str(e, "signer"), signer, sizeof(signer)), SIGNER_MAX, r->signer,
                        sizeof(r->signer));
}

/*
 * "  TASK  VERSION  SLOT  SIZE  SIGNER  SHA256", the active one marked '*' in the first
 * column. A column the daemon tells nothing of (an older one) is left out.
 */
/* Installed but revoked: listed after the table, never used. */
static void print_revoked_list(json_t *revoked) {
        for (size_t i = 0; i < json_array_size(revoked); i++) {
                json_t *e = json_array_get(revoked, i);
                uint64_t v = 0;
                (void) get_u64(e, "version", &v);
                printf("  revoked: %s v%" PRIu64 ": %s\n", get_str(e, "task") ?: "?", v, get_str(e, "why") ?: "?");
        }
}

static int print_list(json_t *tasks, json_t *revoked) {
        bool has_slot = false, has_size = false, has_signer = false, has_sha = false;
        size_t task_w = 4, size_w = 4, signer_w = 6;
        size_t n = json_array_size(tasks);
        _cleanup_free_ ListRow *rows = NULL;

        json_sanitize(tasks);
        json_sanitize(revoked);
        if (n == 0) {
                printf("No task bundles installed.\n");
                print_revoked_list(revoked);
                return TPCTL_EXIT_OK;
        }
        rows = calloc(n, sizeof(ListRow));
        if (!rows)
                return tpctl_fail(TPCTL_FAILURE_INTERNAL, "out of memory");
        for (size_t i = 0; i < n; i++) {
                json_t *e = json_array_get(tasks, i);
                ListRow *r = &rows[i];

                list_row(e, r);
                has_slot |= json_object_get(e, "slot") != NULL;
                has_size |= json_is_integer(json_object_get(e, "bundle_size")) || json_is_integer(json_object_get(e, "size"));
                has_signer |= json_is_string(json_object_get(e, "signer"));
                has_sha |= r->sha256 != NULL;
                task_w = max_size(task_w, utf8_width(r->task));
                size_w = max_size(size_w, strlen(r->size));
                signer_w = max_size(signer_w, utf8_width(r->signer));
        }

        printf("  ");
        print_cell("TASK", task_w);
        printf("  %7s", "VERSION");
        if (has_slot)
                printf("  SLOT");
        if (has_size)
                printf("  %*s", (int) size_w, "SIZE");
        if (has_signer) {
                printf("  ");
                print_cell("SIGNER", has_sha ? signer_w : 0);
        }
        if (has_sha)
                printf("  SHA256");
        printf("\n");
        for (size_t i = 0; i < n; i++) {
                const ListRow *r = &rows[i];

                printf("%c ", r->active ? '*' : ' ');
                print_cell(r->task, task_w);
                printf("  %7s", r->version);
                if (has_slot)
                        printf("  %-4s", r->slot);
                if (has_size)
                        printf("  %*s", (int) size_w, r->size);
                if (has_signer) {
                        printf("  ");
                        print_cell(r->signer, has_sha ? signer_w : 0);
                }
                if (has_sha)
                        printf("  %s", r->sha256 ?: "-");
                printf("\n");
        }
        print_revoked_list(revoked);
        return TPCTL_EXIT_OK;
}

int cmd_list(Tpctl *t, int argc, char *argv[]) {
        _cleanup_(json_decrefp) json_t *req = NULL, *resp = NULL;
        int ex;

        ex = tpctl_parse_options(t, "list", argc, argv);
        if (ex != TPCTL_GO_ON)
                return ex;
        req = json_pack("{s:s}", "cmd", "list");
        if (!req)
                return tpctl_fail(TPCTL_FAILURE_INTERNAL, "out of memory");
        ex = tpctl_simple_call(t, req, &resp);
        if (ex != TPCTL_EXIT_OK || t->json)
                return ex;
        json_t *models = json_object_get(resp, "models"), *l;
        const char *name;
        if (!json_is_object(models))
                return print_list(json_object_get(resp, "tasks"), json_object_get(resp, "revoked"));
        json_object_foreach(models, name, l) {
                print_model_heading(models, name);
                if ((ex = print_list(json_object_get(l, "tasks"), json_object_get(l, "revoked"))) != TPCTL_EXIT_OK)
                        return ex;
        }
        return ex;
}
