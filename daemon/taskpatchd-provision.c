/* SPDX-License-Identifier: MIT */
/* Provisioning a base model into both slots, and installing a bundle. Each reads top to bottom. */

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "atomicdir.h"
#include "bundle.h"
#include "clock.h"
#include "create.h"
#include "fileio.h"
#include "filejob.h"
#include "sign.h"
#include "taskpatchd-log.h"
#include "taskpatchd-manager.h"
#include "taskpatchd-policy.h"
#include "yaml-doc.h"

#define SPACE_MARGIN (1u << 20)

/* ---- provision ---- */

typedef enum ProvisionStage {
        PROVISION_COPY,                 /* the client's model into slot b's temporary */
        PROVISION_HASH,                 /* ... and hash what landed on our disk */
        PROVISION_CLONE,                /* slot b's temporary into slot a's */
        PROVISION_VERIFY,               /* ... and check it hashes the same */
        PROVISION_COMMIT,
} ProvisionStage;

typedef struct Provision {
        ProvisionStage stage;
        FileSet src;                    /* the client's file, or the files of its directory */
        uint64_t size;
        bool has_expected;
        uint8_t expected[SHA256_DIGEST_SIZE];
        AtomicModel tmp[_SLOT_ID_MAX];  /* each slot's new file or directory */
        SetCopy copy;
        FileHash *hash;
        uint8_t sha256[SHA256_DIGEST_SIZE];
        uint8_t (*file_sha256)[SHA256_DIGEST_SIZE];     /* each file's, for base-files.json */
        uint8_t *chunks;
        Artifact *artifact;
} Provision;

static void provision_free(void *data) {
        Provision *p = data;
        set_copy_done(&p->copy);        /* first: its worker may still fdatasync the temporaries */
        fileset_done(&p->src);
        for (SlotId s = 0; s < _SLOT_ID_MAX; s++)
                atomic_model_abort(&p->tmp[s]);
        file_hash_free(p->hash);
        free(p->file_sha256);
        free(p->chunks);
        artifact_free(p->artifact);
        free(p);
}

/* A model of the other shape than the last one: the old slots (a file where a directory goes, or the reverse) go. */
static int remove_other_kind(Manager *m, SlotId s, TpError *err) {
        const char *other = m->ps.base.directory ? m->files[s].file_path : m->files[s].dir_path;
        int r = remove_tree(other);
        if (r < 0)
                return tp_error(err, r, "%s: %s", other, strerror(-r));
        return 0;
}

static int provision_commit(Operation *op, Provision *p) {
        Manager *m = op->m;
        uint64_t n_chunks = chunk_count(p->size, CREATE_DEFAULT_CHUNK);
        Seal seal = { .size = p->size, .chunk_size = CREATE_DEFAULT_CHUNK };
        bool directory = p->src.directory;
        int r;

        memcpy(seal.sha256, p->sha256, SHA256_DIGEST_SIZE);
        memcpy(seal.base_sha256, p->sha256, SHA256_DIGEST_SIZE);
        memcpy(seal.base_layout, p->artifact->layout, SHA256_DIGEST_SIZE);
        chunk_table_root(p->chunks, n_chunks, seal.chunk_root);

        /* From here the old slots are replaced: a crash leaves "provisioning", which asks for a new provision. */
        m->ps.provisioned = false;
        m->ps.provisioning = true;
        m->ps.committed = SLOT_A;
        m->ps.trial = (TrialInfo) { 0 };        /* the accepted versions stay: rollback protection outlives a base */
        m->ps.n_history = m->ps.n_failed = 0;   /* what ran on the old base is no place to roll back to */
        state_committed(&m->ps, NULL, 0);
        m->ps.base = (BaseInfo) { .size = p->size, .kind = p->artifact->kind, .chunk_size = CREATE_DEFAULT_CHUNK,
                                  .directory = directory };
        memcpy(m->ps.base.sha256, p->sha256, SHA256_DIGEST_SIZE);
        memcpy(m->ps.base.layout, p->artifact->layout, SHA256_DIGEST_SIZE);
        memcpy(m->ps.base.chunk_root, seal.chunk_root, SHA256_DIGEST_SIZE);
        if ((r = manager_save_state(m, &op->err)) < 0)
                return r;
        /*
         * The list of files only now: while the state says "provisioning" nothing trusts it, and
         * a crash before this point leaves the old base's list beside the old state.
         */
        manifest_files_done(&m->base_files);
        if (directory) {
                if ((r = manifest_files_set(&m->base_files, &p->src, (const uint8_t (*)[SHA256_DIGEST_SIZE]) p->file_sha256)) < 0)
                        return tp_error(&op->err, r, "provision: %s", strerror(-r));
                if ((r = base_files_save(m->base_files_path, &m->base_files, &op->err)) < 0)
                        return r;
        }
        manager_use_slot_kind(m, directory);
        for (SlotId s = 0; s < _SLOT_ID_MAX; s++) {
                uint64_t bytes = 0;
                if ((r = atomic_model_commit(&p->tmp[s])) < 0)
                        return tp_error(&op->err, r, "%s: %s", m->files[s].path, strerror(-r));
                if ((r = remove_other_kind(m, s, &op->err)) < 0)
                        return r;
                if (unlink(m->files[s].undo) < 0 && errno != ENOENT)
                        return tp_error(&op->err, negative_errno(), "%s: %s", m->files[s].undo, strerror(errno));
                if ((r = chunk_table_save(m->files[s].chunks, p->chunks, n_chunks, &bytes, &op->err)) < 0)
                        return r;
                m->counters.state_bytes += bytes;
                m->seals[s] = seal;
                if ((r = manager_seal_identity(m, s, &m->seals[s], &op->err)) < 0 ||
                    (r = manager_save_seal(m, s, &op->err)) < 0)
                        return r;
                m->sealed[s] = true;
        }
        m->ps.provisioning = false;
        m->ps.provisioned = true;
        if ((r = manager_activate(m, op, SLOT_A, false, &op->err)) < 0) {
                /* What a restart makes of an interrupted provisioning: none; provision again. */
                TpError ignored = {};
                m->ps.provisioned = m->ps.provisioning = false;         /* accepted versions and serial stay */
                m->ps.trial = (TrialInfo) { 0 };
                m->ps.committed = SLOT_A;
                (void) unlink(m->config->model_path);
                if (manager_save_state(m, &ignored) < 0)
                        mlog_error(m, "%s (a restart finds the provisioning interrupted)", ignored.message);
                return r;
        }

        /* Bundles made for another base are of no use now; they stay on disk but are not listed. */
        char *tasks = strdup(m->store.dir);
        if (tasks) {
                if (manager_scan_store(m, tasks, NULL) < 0)
                        mlog_warning(m, "cannot list the installed bundles in %s", tasks);
                free(tasks);
        }
        char h[SHA256_HEX_SIZE];
        sha256_to_hex(p->sha256, h);
        if (directory)
                mlog_info(m, "provisioned %s base (%zu files, %" PRIu64 " bytes, set digest %s) into slots a and b",
                          artifact_kind_to_string(p->artifact->kind), p->src.n_files, p->size, h);
        else
                mlog_info(m, "provisioned %s base (%" PRIu64 " bytes, SHA-256 %s) into slots a and b",
                          artifact_kind_to_string(p->artifact->kind), p->size, h);
        manager_record(m, "provisioned", NULL, false, "the base model is in both slots");
        return 0;
}

static int provision_step(Operation *op) {
        Provision *p = op->data;
        Manager *m = op->m;
        uint8_t d[SHA256_DIGEST_SIZE];
        char got[SHA256_HEX_SIZE], want[SHA256_HEX_SIZE];
        int r;

        switch (p->stage) {
        case PROVISION_COPY:
        case PROVISION_CLONE: {
                SlotId s = p->stage == PROVISION_COPY ? SLOT_B : SLOT_A;
                op->phase = "copy";
                r = set_copy_step(&p->copy, OPERATION_SLICE);
                if (r < 0) {
                        const FileSet *dst = &p->tmp[s].set;
                        size_t f = p->copy.file < dst->n_files ? p->copy.file : 0;
                        return tp_error(&op->err, r, "copying the model into %s%s%s: %s", m->files[s].path,
                                        dst->directory ? "/" : "", dst->directory ? dst->files[f].path : "",
                                        strerror(-r));
                }
                op->done = p->copy.pos;
                op->total = p->size;
                manager_progress(m, op, "staging");
                if (r > 0)
                        return 1;
                if ((r = file_hash_new_set(&p->tmp[s].set, CREATE_DEFAULT_CHUNK, &p->hash)) < 0)
                        return tp_error(&op->err, r, "hashing: %s", strerror(-r));
                p->stage = p->stage == PROVISION_COPY ? PROVISION_HASH : PROVISION_VERIFY;
                return 1;
        }
        case PROVISION_HASH:
        case PROVISION_VERIFY:
                op->phase = "verify";
                r = file_hash_step(p->hash, OPERATION_SLICE);
                if (r < 0)
                        return tp_error(&op->err, r, "reading back the copy: %s", strerror(-r));
                op->done = file_hash_done(p->hash);
                op->total = p->size;
                manager_progress(m, op, "staging");
                if (r > 0)
                        return 1;
                if (p->stage == PROVISION_HASH) {
                        file_hash_result_files(p->hash, p->file_sha256, p->sha256, &p->chunks);
                        p->hash = file_hash_free(p->hash);
                        if (p->has_expected && memcmp(p->sha256, p->expected, SHA256_DIGEST_SIZE) != 0) {
                                sha256_to_hex(p->sha256, got);
                                sha256_to_hex(p->expected, want);
                                op->err_code = "refused";
                                return tp_error(&op->err, -EBADMSG, "the model's %s is %s, expected %s",
                                                p->src.directory ? "set digest" : "SHA-256", got, want);
                        }
                        /* The format is read from our copy: the client's files may change under us. */
                        if ((r = artifact_open_set(&p->tmp[SLOT_B].set, &p->artifact, &op->err)) < 0) {
                                op->err_code = "refused";
                                return r;
                        }
                        set_copy_done(&p->copy);
                        set_copy_init(&p->copy, &p->tmp[SLOT_B].set, &p->tmp[SLOT_A].set);
                        p->stage = PROVISION_CLONE;
                        return 1;
                }
                file_hash_result(p->hash, d, NULL);
                p->hash = file_hash_free(p->hash);
                if (memcmp(d, p->sha256, SHA256_DIGEST_SIZE) != 0)
                        return tp_error(&op->err, -EIO, "slot a's copy reads back differently from slot b's: storage fault?");
                p->stage = PROVISION_COMMIT;
                return 1;
        case PROVISION_COMMIT:
                op->phase = "commit";
                r = provision_commit(op, p);
                return r < 0 ? r : 0;
        default:
                abort();
        }
}

static void provision_freep(Provision **p) {
        if (*p)
                provision_free(*p);
}

/* The slots' temporaries: a directory's files copied one for one, beside each slot. */
static int open_temporaries(Manager *m, Provision *p, TpError *err) {
        for (SlotId s = 0; s < _SLOT_ID_MAX; s++) {
                const char *path = p->src.directory ? m->files[s].dir_path : m->files[s].file_path;
                int r = atomic_model_open(path, &p->src, p->size, &p->tmp[s]);
                if (r < 0)
                        return tp_error(err, r, "%s: cannot create a temporary beside it: %s", path,
                                        atomic_file_strerror(r));
        }
        return 0;
}

int provision_new(Manager *m, int fd, const uint8_t *expected_sha256, Operation **ret, TpError *err) {
        _cleanup_free_ Operation *op = calloc(1, sizeof(Operation));
        _cleanup_(provision_freep) Provision *p = calloc(1, sizeof(Provision));
        int64_t avail;
        int r;

        if (!op || !p) {
                safe_close(fd);
                return -ENOMEM;
        }
        *p = (Provision) { .src = FILESET_NULL, .tmp = { ATOMIC_MODEL_NULL, ATOMIC_MODEL_NULL } };
        /* A file, or a directory the daemon walks itself: it never opens a path the client names. */
        TpError why = {};
        if ((r = fileset_open(fd, "model", &p->src, &why)) < 0)
                return tp_error(err, r == -ENOENT ? -EINVAL : r, "provision: the model passed: %s", why.message);
        p->size = p->src.size;
        if (p->size == 0)
                return tp_error(err, -EINVAL, "provision: the model passed is empty");
        p->file_sha256 = calloc(p->src.n_files, SHA256_DIGEST_SIZE);
        if (!p->file_sha256)
                return -ENOMEM;
        if (expected_sha256) {
                p->has_expected = true;
                memcpy(p->expected, expected_sha256, SHA256_DIGEST_SIZE);
        }
        avail = manager_free_space(m);
        if (avail >= 0 && (uint64_t) avail < 2 * p->size + SPACE_MARGIN)
                return tp_error(err, -ENOSPC, "provision: two slots of %" PRIu64 " bytes%s need %" PRIu64
                                " bytes free in %s, %" PRId64 " are%s", p->size,
                                p->src.directory ? " (the directory's files, twice)" : "",
                                2 * p->size + SPACE_MARGIN, m->config->state_dir, avail, m->space_note);
        if ((r = open_temporaries(m, p, err)) < 0)
                return r;
        set_copy_init(&p->copy, &p->src, &p->tmp[SLOT_B].set);
        op->cmd = "provision";
        op->start = EVENT_PROVISION;
        op->step = provision_step;
        op->phase = "copy";
        op->total = p->size;
        op->data = TAKE_PTR(p);
        op->free_data = provision_free;
        *ret = TAKE_PTR(op);
        return 0;
}

/* ---- install ---- */

typedef enum InstallStage {
        INSTALL_COPY,                   /* the client's bundle into a temporary in tasks/<task>/ */
        INSTALL_VERIFY,                 /* our copy: signature, manifest, payload hash */
        INSTALL_COMMIT,
} InstallStage;

typedef struct Install {
        InstallStage stage;
        int src;
        Bundle *bundle;                 /* the client's, opened on a duplicate of src */
        AtomicFile tmp;
        char *path;
        FileCopy copy;
        Sha256 payload;
        uint64_t pos;
        uint8_t *buf;
        char signer[256];
        bool then_switch;
} Install;

static void install_free(void *data) {
        Install *in = data;
        safe_close(in->src);
        bundle_free(in->bundle);
        atomic_file_abort(&in->tmp);
        free(in->path);
        free(in->buf);
        free(in);
}

int manager_dates_now(const Manager *m, time_t *ret, TpError *err) {
        bool strict = m->config->trust.clock == CLOCK_STRICT;
        return policy_dates_now(m->config->trust.clock, clock_wall(), clock_floor(), (time_t) m->ps.time_floor,
                                strict && clock_synchronized(), ret, err);
}

int manager_reject_bundle(Manager *m, const Manifest *mf, TpError *err) {
        char task[TASK_NAME_MAX + 1], stays[64] = "no version of it is accepted";
        uint64_t version = mf->version;
        TpError ignored = {};
        int r;

        snprintf(task, sizeof(task), "%s", mf->task);   /* @mf may be the removed bundle's */
        state_failed_add(&m->ps, task, version);
        if (manager_save_state(m, &ignored) < 0)
                mlog_error(m, "%s", ignored.message);
        if ((r = store_remove(&m->store, task, version)) < 0)
                mlog_error(m, "%s v%" PRIu64 ": cannot remove its bundle: %s", task, version, strerror(-r));
        uint64_t accepted = state_accepted(&m->ps, task);
        if (accepted)
                snprintf(stays, sizeof(stays), "the accepted version stays v%" PRIu64, accepted);
        return tp_error_prefix(err, -EBADMSG, "%s v%" PRIu64 " does not make the target its manifest names, even in "
                               "a fresh copy (the bundle's fault): removed and marked failed; %s", task, version,
                               stays);
}

BundleTrust manager_bundle_trust(const Manager *m, time_t now) {
        SignatureTrust s = trust_store_role(m->trust, m->config, TRUST_ROLE_BUNDLE, now);
        return (BundleTrust) { .ca_path = s.ca_path, .ca_pem = s.ca_pem, .now = now, .crl_path = s.crl_path,
                               .crl_expired_warn = s.crl_expired_warn, .revoked = s.revoked,
                               .threshold = s.threshold, .max_manifest_bytes = m->config->limits.manifest_bytes,
                               .max_spans = m->config->limits.manifest_spans,
                               .decrypt_key = m->trust ? m->trust->decrypt_key : NULL };
}

int manager_scan_store(Manager *m, const char *tasks, void (*report)(const char *path, const char *why)) {
        BundleTrust trust = manager_bundle_trust(m, SIGNATURE_CLOCK_UNKNOWN);
        int r = store_scan(&m->store, tasks, &trust, m->ps.provisioned ? &m->ps.base : NULL, report);

        manager_check_revoked(m);
        return r;
}

/* A task: made for the provisioned base, in its layout (or a relocating bundle). */
static int check_task_bundle(Manager *m, const Manifest *mf, const char *what, TpError *err) {
        char want[SHA256_HEX_SIZE], got[SHA256_HEX_SIZE];

        if (memcmp(mf->base.sha256, m->ps.base.sha256, SHA256_DIGEST_SIZE) != 0) {
                sha256_to_hex(mf->base.sha256, got);
                sha256_to_hex(m->ps.base.sha256, want);
                return tp_error(err, -EBADMSG, "%s: made for another base (SHA-256 %s); this device's base is %s", what,
                                got, want);
        }
        if (memcmp(mf->base.layout, m->ps.base.layout, SHA256_DIGEST_SIZE) != 0 || mf->kind != m->ps.base.kind)
                return tp_error(err, -EBADMSG, "%s: its base layout is not the provisioned base's", what);
        /* A relocating bundle (format 2) may change the size; an in-layout one is staged in place. */
        if (mf->format != MANIFEST_FORMAT_RELOCATING && mf->target.size != m->ps.base.size)
                return tp_error(err, -EBADMSG, "%s: an in-layout bundle (format 1) that changes the model's size (%" PRIu64
                                " -> %" PRIu64 " bytes): make it again with this taskpatch, which writes a relocating "
                                "bundle for it", what, m->ps.base.size, mf->target.size);
        return 0;
}

static int already_the_base(Manager *m, const Manifest *mf, const char *what, TpError *err) {
        if (memcmp(mf->target.sha256, m->ps.base.sha256, SHA256_DIGEST_SIZE) == 0)
                return tp_error(err, -EBADMSG, "%s: a base bundle (line %s v%" PRIu64 ") that makes the base this device "
                                "runs already", what, mf->task, mf->version);
        return 0;
}

/* A base bundle: full (from nothing), or a delta from the provisioned base; a base of the same shape. */
static int check_base_bundle(Manager *m, const Manifest *mf, const char *what, TpError *err) {
        char want[SHA256_HEX_SIZE], got[SHA256_HEX_SIZE];
        bool directory = mf->target.files.set.directory;

        if (directory != m->ps.base.directory)
                return tp_error(err, -EOPNOTSUPP, "%s: a base bundle (line %s v%" PRIu64 ") that makes %s, and this "
                                "device's model is %s: a base bundle keeps the model's shape; provision the new base "
                                "(tpctl provision)", what, mf->task, mf->version,
                                directory ? "a model directory" : "one file", m->ps.base.directory ? "a directory" :
                                "one file");
        if (mf->base.size == 0)
                return already_the_base(m, mf, what, err);
        if (memcmp(mf->base.sha256, m->ps.base.sha256, SHA256_DIGEST_SIZE) != 0) {
                sha256_to_hex(mf->base.sha256, got);
                sha256_to_hex(m->ps.base.sha256, want);
                return tp_error(err, -EBADMSG, "%s: a base delta from another base (SHA-256 %s); this device's base is "
                                "%s (a full base bundle, taskpatch create --base-bundle --full, replaces any base)",
                                what, got, want);
        }
        if (memcmp(mf->base.layout, m->ps.base.layout, SHA256_DIGEST_SIZE) != 0)
                return tp_error(err, -EBADMSG, "%s: its base layout is not the provisioned base's", what);
        if (mf->format != MANIFEST_FORMAT_RELOCATING && mf->target.size != m->ps.base.size)
                return tp_error(err, -EBADMSG, "%s: an in-layout base delta (format 1) that changes the size", what);
        return already_the_base(m, mf, what, err);
}

/* An encrypted bundle opens with the device's key, loaded now if it was not at start; else it is refused. */
static int unlock_bundle(Manager *m, Bundle *b, TpError *err) {
        if (!b->manifest->encryption || b->unlocked)
                return 0;
        TpError why = {};
        const DecryptKey *k = m->trust ? trust_store_decrypt_key(m->trust, m->config, &why) : NULL;
        if (!k)
                return tp_error(err, -ENOKEY, "%s: encrypted for %zu recipient%s, but %s", b->what,
                                b->manifest->encryption->n_recipients,
                                b->manifest->encryption->n_recipients == 1 ? "" : "s", why.message);
        return bundle_unlock(b, k, err);
}

int manager_open_bundle(Manager *m, int fd, const char *what, Bundle **ret, char signer[256], const char **ret_code,
                         TpError *err) {
        _cleanup_(bundle_freep) Bundle *b = NULL;
        time_t dates;
        int r;

        *ret_code = "refused";
        if ((r = manager_dates_now(m, &dates, err)) < 0) {
                safe_close(fd);
                return tp_error_prefix(err, r, "%s", what);
        }
        BundleTrust trust = manager_bundle_trust(m, dates);
        if (trust.now == SIGNATURE_CLOCK_UNKNOWN) {
                char now[21], floor[21];
                format_time_utc((int64_t) clock_wall(), now);
                format_time_utc((int64_t) clock_floor(), floor);
                mlog_warning(m,
                             "the clock reads %s, before this build (%s): it is not set, so certificate and expiry "
                             "dates of %s are not checked (trust.clock: strict refuses instead)",
                             now, floor, what);
        }
        if ((r = bundle_open_verified_fd(fd, what, &trust, &b, err)) < 0)
                return r;
        if ((r = unlock_bundle(m, b, err)) < 0)
                return r;
        const Manifest *mf = b->manifest;
        if (strcmp(mf->model, m->model) != 0)
                return tp_error(err, -EBADMSG, "%s: made for model '%s'; this device's model is '%s' (taskpatch create "
                                "--model names it)", what, mf->model, m->model);
        if (mf->role == MANIFEST_ROLE_BASE) {
                if ((r = check_base_bundle(m, mf, what, err)) < 0)
                        return r;
        } else if ((r = check_task_bundle(m, mf, what, err)) < 0)
                return r;
        struct statvfs sv;
        if (statvfs(m->config->state_dir, &sv) == 0 && mf->target.size > (uint64_t) sv.f_blocks * sv.f_frsize)
                return tp_error(err, -EFBIG, "%s: its target of %" PRIu64 " bytes is larger than the whole file system "
                                "of %s (%" PRIu64 " bytes): it could never be staged", what, mf->target.size,
                                m->config->state_dir, (uint64_t) sv.f_blocks * sv.f_frsize);
        if (trust.signer_info.crl_expired) {
                char when[21];
                format_time_utc((int64_t) trust.signer_info.crl_next_update, when);
                mlog_warning(m, "%s: the CRL of '%s' is out of date (its next update was due %s): accepted because "
                             "trust.crl_expired is warn; update trust.crl", what, trust.signer_info.crl_issuer, when);
        }
        snprintf(signer, 256, "%s", trust.signer);
        *ret = TAKE_PTR(b);
        return 0;
}

static int install_step(Operation *op) {
        Install *in = op->data;
        Manager *m = op->m;
        const Manifest *mf = in->bundle->manifest;
        int r;

        switch (in->stage) {
        case INSTALL_COPY:
                op->phase = "copy";
                r = file_copy_step(&in->copy, OPERATION_SLICE);
                if (r < 0)
                        return tp_error(&op->err, r, "copying the bundle to %s: %s", in->path, strerror(-r));
                op->done = in->copy.pos;
                op->total = in->bundle->file_size;
                if (r > 0)
                        return 1;
                {
                        /* Our copy must carry the very manifest and signature we verified: the client's file may change. */
                        _cleanup_(bundle_freep) Bundle *copy = NULL;
                        int cfd = fcntl(in->tmp.fd, F_DUPFD_CLOEXEC, 3);
                        if (cfd < 0)
                                return tp_error(&op->err, negative_errno(), "%s: %s", in->path, strerror(errno));
                        if ((r = bundle_open_fd(cfd, in->path, &copy, &op->err)) < 0 ||
                            copy->manifest_len != in->bundle->manifest_len ||
                            memcmp(copy->manifest_text, in->bundle->manifest_text, copy->manifest_len) != 0 ||
                            copy->signature_len != in->bundle->signature_len ||
                            (copy->signature_len &&
                             memcmp(copy->signature, in->bundle->signature, copy->signature_len) != 0)) {
                                op->err_code = "refused";
                                return tp_error(&op->err, -EBADMSG, "the bundle changed while it was being copied");
                        }
                }
                in->stage = INSTALL_VERIFY;
                in->pos = in->bundle->payload_offset;
                sha256_init(&in->payload);
                in->buf = malloc(1u << 20);
                return in->buf ? 1 : -ENOMEM;
        case INSTALL_VERIFY: {
                /* What we stored is what gets applied: its payload must be the signed one. */
                op->phase = "verify";
                uint64_t end = in->bundle->file_size;
                for (unsigned k = 0; k < 8 && in->pos < end; k++) {
                        size_t n = end - in->pos < (1u << 20) ? (size_t) (end - in->pos) : (1u << 20);
                        if ((r = pread_full(in->tmp.fd, in->buf, n, in->pos)) < 0)
                                return tp_error(&op->err, r == -ENODATA ? -EIO : r, "%s: reading back: %s", in->path,
                                                strerror(r == -ENODATA ? EIO : -r));
                        sha256_update(&in->payload, in->buf, n);
                        in->pos += n;
                }
                op->done = in->pos - in->bundle->payload_offset;
                op->total = in->bundle->file_size - in->bundle->payload_offset;
                if (in->pos < end)
                        return 1;
                uint8_t d[SHA256_DIGEST_SIZE];
                sha256_final(&in->payload, d);
                if (memcmp(d, mf->payload.sha256, SHA256_DIGEST_SIZE) != 0) {
                        op->err_code = "refused";
                        return tp_error(&op->err, -EBADMSG, "%s: the payload does not match its manifest (damaged or tampered)",
                                        in->bundle->what);
                }
                in->stage = INSTALL_COMMIT;
                return 1;
        }
        case INSTALL_COMMIT:
                /* The accepted version is not raised here but when the version first runs (manager_activate()). */
                if ((r = atomic_file_commit(&in->tmp)) < 0)
                        return tp_error(&op->err, r, "%s: %s", in->path, strerror(-r));
                if ((r = store_add(&m->store, mf, in->path, in->bundle->file_size, in->signer)) < 0)
                        return r;
                mlog_info(m, "installed %s v%" PRIu64 " (%" PRIu64 " bytes, signed by %s)", mf->task, mf->version,
                          in->bundle->file_size, in->signer[0] ? in->signer : "-");
                json_t *ev = json_pack("{s:s, s:s, s:I, s:s}", "event", "update-available", "task", mf->task, "version",
                                       (json_int_t) mf->version, "source", "install");
                manager_emit(m, op->transaction, ev);
                if (in->then_switch) {
                        char task[TASK_NAME_MAX + 1];
                        uint64_t version = mf->version;
                        snprintf(task, sizeof(task), "%s", mf->task);
                        /* switch_continue() frees this install's data: use only copies from here on. */
                        return switch_continue(op, task, version, &op->err);
                }
                return 0;
        default:
                abort();
        }
}

static void install_freep(Install **p) {
        if (*p)
                install_free(*p);
}

int install_new(Manager *m, int fd, const InstallRequest *req, Operation **ret, const char **ret_code, TpError *err) {
        bool allow_downgrade = req->allow_downgrade, then_switch = req->then_switch;
        _cleanup_free_ Operation *op = calloc(1, sizeof(Operation));
        _cleanup_(install_freep) Install *in = calloc(1, sizeof(Install));
        int dup_fd, r;

        if (!op || !in) {
                safe_close(fd);
                return -ENOMEM;
        }
        *in = (Install) { .src = fd, .tmp = ATOMIC_FILE_NULL, .then_switch = then_switch };
        dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (dup_fd < 0)
                return tp_error(err, negative_errno(), "install: %s", strerror(errno));
        if ((r = manager_open_bundle(m, dup_fd, "the bundle", &in->bundle, in->signer, ret_code, err)) < 0)
                return r;
        const Manifest *mf = in->bundle->manifest;
        uint64_t installed = store_newest(&m->store, mf->task), accepted = state_accepted(&m->ps, mf->task);
        *ret_code = "refused";
        if (req->expect_target && (mf->role != MANIFEST_ROLE_BASE ||
                                   memcmp(mf->target.sha256, req->expect_target, SHA256_DIGEST_SIZE) != 0)) {
                char got[SHA256_HEX_SIZE], want[SHA256_HEX_SIZE];
                sha256_to_hex(mf->target.sha256, got);
                sha256_to_hex(req->expect_target, want);
                return tp_error(err, -EBADMSG, "%s v%" PRIu64 ": %s %s, the channel's base is %s: refused", mf->task,
                                mf->version, mf->role == MANIFEST_ROLE_BASE ? "a base bundle that makes" :
                                "a task bundle, not a base bundle, that makes", got, want);
        }
        if (mf->version < installed && !allow_downgrade)
                return tp_error(err, -EBADMSG, "%s v%" PRIu64 " is older than the installed v%" PRIu64
                                " (use --allow-downgrade to install it anyway)", mf->task, mf->version, installed);
        if (mf->version < accepted && !allow_downgrade)
                return tp_error(err, -EBADMSG, "%s v%" PRIu64 " is older than v%" PRIu64 ", which this device has "
                                "already accepted (use --allow-downgrade to install it anyway)", mf->task, mf->version,
                                accepted);
        /* A version far past what came before would block every later one: a signer's error, or a key's abuse. */
        uint64_t from = installed > accepted ? installed : accepted, cap = m->config->trust.max_version_jump;
        if (cap > 0 && mf->version > from && mf->version - from > cap)
                return tp_error(err, -EBADMSG, "%s v%" PRIu64 " jumps %" PRIu64 " versions past v%" PRIu64 ", more than "
                                "trust.max_version_jump (%" PRIu64 "): refused (a version this high would block every "
                                "later one)", mf->task, mf->version, mf->version - from, from, cap);
        int64_t avail = manager_free_space(m);
        *ret_code = "no-space";
        if (avail >= 0 && (uint64_t) avail < in->bundle->file_size + SPACE_MARGIN)
                return tp_error(err, -ENOSPC, "%s v%" PRIu64 ": the bundle is %" PRIu64 " bytes, %" PRId64
                                " are free in %s%s", mf->task, mf->version, in->bundle->file_size, avail,
                                m->config->state_dir, m->space_note);
        *ret_code = "io";
        in->path = store_bundle_path(&m->store, mf->task, mf->version);
        if (!in->path)
                return -ENOMEM;
        _cleanup_free_ char *dir = strdup(in->path);
        if (!dir)
                return -ENOMEM;
        *strrchr(dir, '/') = 0;
        /* A new task's directory must be durable before its bundle is announced as installed. */
        if ((r = mkdir_durable(dir, 0750)) < 0)
                return tp_error(err, r, "%s: %s", dir, strerror(-r));
        if ((r = atomic_file_open(in->path, &in->tmp)) < 0)
                return tp_error(err, r, "%s: %s", in->path, strerror(-r));
        file_copy_init(&in->copy, in->src, in->tmp.fd, in->bundle->file_size);
        snprintf(op->task, sizeof(op->task), "%s", mf->task);
        op->version = mf->version;
        op->total = in->bundle->file_size;
        op->data = TAKE_PTR(in);
        op->free_data = install_free;
        op->cmd = "install";
        op->start = EVENT_INSTALL;
        op->step = install_step;
        op->phase = "copy";
        *ret_code = NULL;
        *ret = TAKE_PTR(op);
        return 0;
}
