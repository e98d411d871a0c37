/* SPDX-License-Identifier: MIT */

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mbedtls/asn1.h>
#include <mbedtls/bignum.h>
#include <mbedtls/ecp.h>
#include <mbedtls/error.h>
#include <mbedtls/pem.h>
#include <mbedtls/pk.h>
#include <mbedtls/platform_util.h>

#include "fileio.h"
#include "sign-files.h"
#include "sign.h"

/* ---- mbedTLS errors, translated here and in sign.c only ----------------------------------------- */

static bool mbed_is_alloc_failure(int mret) {
        int high = -((-mret) & 0xFF80), low = -((-mret) & 0x007F);

        return high == MBEDTLS_ERR_X509_ALLOC_FAILED || high == MBEDTLS_ERR_PK_ALLOC_FAILED ||
               high == MBEDTLS_ERR_ECP_ALLOC_FAILED || high == MBEDTLS_ERR_PEM_ALLOC_FAILED ||
               low == MBEDTLS_ERR_ASN1_ALLOC_FAILED || low == MBEDTLS_ERR_MPI_ALLOC_FAILED;
}

/* "<what>: <mbedTLS's description>", returned as @code (or -ENOMEM for an allocation failure). */
_printf_(4, 5) int mbed_error(TpError *err, int code, int mret, const char *fmt, ...) {
        char what[TP_ERROR_MAX], why[200];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        mbedtls_strerror(mret, why, sizeof(why));
        return tp_error(err, mbed_is_alloc_failure(mret) ? -ENOMEM : code, "%s: %s", what, why);
}

/* ---- files --------------------------------------------------------------------------------------- */

void file_data_done(FileData *f) {
        if (f->data && f->secret)
                mbedtls_platform_zeroize(f->data, f->size + 1);
        free(f->data);
        f->data = NULL;
}

/* Read a whole regular file of at most @max bytes, NUL-terminated (PEM parsers want that). */
int file_read(const char *path, size_t max, bool secret, FileData *ret, TpError *err) {
        _cleanup_close_ int fd = -1;
        _cleanup_free_ uint8_t *data = NULL;
        size_t size, len = 0;
        struct stat st;

        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return tp_error(err, negative_errno(), "%s: %s", path, strerror(errno));
        if (fstat(fd, &st) < 0)
                return tp_error(err, negative_errno(), "%s: %s", path, strerror(errno));
        if (S_ISDIR(st.st_mode))
                return tp_error(err, -EISDIR, "%s: is a directory", path);
        if (!S_ISREG(st.st_mode))
                return tp_error(err, -EINVAL, "%s: not a regular file", path);
        if ((uint64_t) st.st_size > max)
                return tp_error(err, -EFBIG, "%s: %" PRIu64 " bytes, more than the limit of %zu", path,
                                (uint64_t) st.st_size, max);

        size = (size_t) st.st_size;
        data = malloc(size + 1);
        if (!data)
                return -ENOMEM;
        /* A file that shrinks meanwhile gives what was there; one that grows is read up to its old size. */
        while (len < size) {
                ssize_t n = read(fd, data + len, size - len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        int r = tp_error(err, negative_errno(), "%s: %s", path, strerror(errno));
                        if (secret)
                                mbedtls_platform_zeroize(data, size + 1);
                        return r;
                }
                if (n == 0)
                        break;
                len += (size_t) n;
        }
        data[len] = '\0';
        /* The secret flag makes file_data_done() wipe all size + 1 bytes, however many were read. */
        *ret = (FileData) { .data = TAKE_PTR(data), .len = len, .size = size, .secret = secret };
        return 0;
}

/* Add every certificate of a PEM (or single DER) file to @chain; all must parse. */
int certs_load_file(mbedtls_x509_crt *chain, const char *path, size_t max, TpError *err) {
        _cleanup_(file_data_done) FileData f = {};
        int r;

        r = file_read(path, max, false, &f, err);
        if (r < 0)
                return r;
        if (f.len == 0)
                return tp_error(err, -EBADMSG, "%s: empty file, no certificate", path);
        r = mbedtls_x509_crt_parse(chain, f.data, f.len + 1);
        if (r < 0)
                return mbed_error(err, -EBADMSG, r, "%s: not a certificate file", path);
        if (r > 0)
                return tp_error(err, -EBADMSG, "%s: %d certificate(s) in it do not parse", path, r);
        return 0;
}

static bool name_ends(const struct dirent *de, const char *suffix) {
        size_t n = strlen(de->d_name), k = strlen(suffix);

        return de->d_name[0] != '.' && n > k && strcmp(de->d_name + n - k, suffix) == 0;
}

static int ca_dir_filter(const struct dirent *de) {
        return name_ends(de, ".pem") || name_ends(de, ".crt");
}

static int crl_dir_filter(const struct dirent *de) {
        return name_ends(de, ".pem") || name_ends(de, ".crl");
}

typedef struct DirList {
        struct dirent **entries;
        int n;
} DirList;

static void dir_list_done(DirList *l) {
        for (int i = 0; i < l->n; i++)
                free(l->entries[i]);
        free(l->entries);
}

/* What a trust path holds: certificates (trust anchors) or CRLs. */
typedef struct TrustPathKind {
        const char *noun;                       /* "CA", "CRL" */
        const char *item;                       /* "certificate", "CRL" */
        const char *files;                      /* "*.pem, *.crt" */
        int (*filter)(const struct dirent *de);
        int (*load_file)(void *obj, const char *path, TpError *err);
        bool (*empty)(const void *obj);
} TrustPathKind;

/* @path's one file, or the regular files of the directory @path that @k's filter takes (sorted). */
static int trust_path_load(const TrustPathKind *k, void *obj, const char *path, TpError *err) {
        _cleanup_(dir_list_done) DirList l = {};
        struct stat st;
        int r;

        if (stat(path, &st) < 0)
                return tp_error(err, negative_errno(), "%s path %s: %s", k->noun, path, strerror(errno));
        if (!S_ISDIR(st.st_mode))
                return k->load_file(obj, path, err);

        /* scandir() opens the directory with O_CLOEXEC. */
        r = scandir(path, &l.entries, k->filter, alphasort);
        if (r < 0)
                return tp_error(err, negative_errno(), "%s directory %s: %s", k->noun, path, strerror(errno));
        l.n = r;
        if (l.n > SIGNATURE_CA_DIR_FILES_MAX)
                return tp_error(err, -E2BIG, "%s directory %s: %d %s files, more than the limit of %d", k->noun,
                                path, l.n, k->item, SIGNATURE_CA_DIR_FILES_MAX);
        for (int i = 0; i < l.n; i++) {
                char file[PATH_MAX];

                if ((size_t) snprintf(file, sizeof(file), "%s/%s", path, l.entries[i]->d_name) >= sizeof(file))
                        return tp_error(err, -ENAMETOOLONG, "%s directory %s: file name too long", k->noun, path);
                if (stat(file, &st) < 0)
                        return tp_error(err, negative_errno(), "%s: %s", file, strerror(errno));
                if (!S_ISREG(st.st_mode))
                        continue;
                r = k->load_file(obj, file, err);
                if (r < 0)
                        return r;
        }
        if (k->empty(obj))
                return tp_error(err, -ENOKEY, "%s directory %s holds no %s (%s)", k->noun, path, k->item,
                                k->files);
        return 0;
}

static int ca_load_file(void *obj, const char *path, TpError *err) {
        return certs_load_file(obj, path, SIGNATURE_CA_FILE_MAX, err);
}

static bool ca_empty(const void *obj) {
        return ((const mbedtls_x509_crt *) obj)->version == 0;
}

int ca_load(mbedtls_x509_crt *ca, const char *ca_path, TpError *err) {
        static const TrustPathKind kind = { "CA", "certificate", "*.pem, *.crt", ca_dir_filter, ca_load_file, ca_empty };
        return trust_path_load(&kind, ca, ca_path, err);
}

int ca_load_pem(mbedtls_x509_crt *ca, const char *pem, const char *name, TpError *err) {
        int r = mbedtls_x509_crt_parse(ca, (const unsigned char *) pem, strlen(pem) + 1);

        if (r != 0)
                return mbed_error(err, -EBADMSG, r, "%s: not PEM certificates", name);
        return 0;
}

static int crl_load_file(void *obj, const char *path, TpError *err) {
        _cleanup_(file_data_done) FileData f = {};
        int r = file_read(path, SIGNATURE_CRL_FILE_MAX, false, &f, err);

        if (r < 0)
                return r;
        if (f.len == 0)
                return tp_error(err, -EBADMSG, "%s: empty file, no CRL", path);
        r = mbedtls_x509_crl_parse(obj, f.data, f.len + 1);
        if (r != 0)
                return mbed_error(err, -EBADMSG, r, "%s: not a CRL file", path);
        return 0;
}

static bool crl_empty(const void *obj) {
        return ((const mbedtls_x509_crl *) obj)->version == 0;
}

int crl_load(mbedtls_x509_crl *crl, const char *crl_path, TpError *err) {
        static const TrustPathKind kind = { "CRL", "CRL", "*.pem, *.crl", crl_dir_filter, crl_load_file, crl_empty };
        return trust_path_load(&kind, crl, crl_path, err);
}
