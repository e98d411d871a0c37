/* SPDX-License-Identifier: MIT */
/* taskpatch hash: SHA-256 of files, printed exactly as sha256sum prints it. */

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include <fcntl.h>
#include <unistd.h>

#include "cli.h"
#include "filejob.h"
#include "hashfile.h"
#include "taskpatch.h"

static void help(void) {
        printf("Usage: taskpatch hash [--json] [FILE...]\n"
               "\n"
               "Print the SHA-256 of each FILE as sha256sum does ('<hex>  <name>').\n"
               "With no FILE, or when FILE is -, read standard input.\n"
               "An unreadable FILE is reported on stderr; the others are still hashed.\n"
               "A model directory's line is its set digest: the SHA-256 over each file's path,\n"
               "size and SHA-256, as a bundle's manifest and 'tpctl provision --sha256' use it.\n"
               "\n"
               "  --json   print a JSON array of {\"file\", \"sha256\", \"size\"} (or \"error\")\n"
               "\n"
               "Exit status: 0 when every FILE was hashed, 1 otherwise.\n");
}

/* sha256sum escapes names holding '\\', '\n' or '\r' and marks the line with a leading '\\'. */
static void print_line(const char *hex, const char *name) {
        bool escape = strpbrk(name, "\\\n\r") != NULL;

        if (escape)
                fputc('\\', stdout);
        fputs(hex, stdout);
        fputs("  ", stdout);
        for (const char *p = name; *p; p++) {
                if (!escape)
                        fputc(*p, stdout);
                else if (*p == '\\')
                        fputs("\\\\", stdout);
                else if (*p == '\n')
                        fputs("\\n", stdout);
                else if (*p == '\r')
                        fputs("\\r", stdout);
                else
                        fputc(*p, stdout);
        }
        fputc('\n', stdout);
}

int hash_model_dir(const char *path, uint8_t digest[SHA256_DIGEST_SIZE], uint64_t *ret_size, size_t *ret_files) {
        _cleanup_(fileset_done) FileSet set = FILESET_NULL;
        _cleanup_(file_hash_freep) FileHash *h = NULL;
        TpError err = {};
        int r;

        int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        r = fileset_open_dir(fd, &set, &err);
        close(fd);
        if (r < 0) {
                cli_error("%s: %s", path, err.message);
                return r;
        }
        if ((r = file_hash_new_set(&set, 0, &h)) < 0)
                return r;
        while ((r = file_hash_step(h, 64u << 20)) > 0)
                ;
        if (r < 0)
                return r;
        file_hash_result(h, digest, NULL);
        *ret_size = set.size;
        *ret_files = set.n_files;
        return 0;
}

int verb_hash(int argc, char *argv[]) {
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "json", no_argument, NULL, 'j' },
                {},
        };
        static char *stdin_only[] = { (char *) "-", NULL };
        bool json = false;
        int c, status = EXIT_OK;
        json_t *results = NULL;

        cli_program = "taskpatch hash";
        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return EXIT_OK;
                case 'j':
                        json = true;
                        break;
                default:
                        return EXIT_USAGE;
                }

        char **files = optind < argc ? argv + optind : stdin_only;
        if (json) {
                results = json_array();
                if (!results) {
                        cli_error("out of memory");
                        return EXIT_FAILED;
                }
        }

        for (; *files; files++) {
                const char *name = *files;
                uint8_t digest[SHA256_DIGEST_SIZE];
                char hex[SHA256_HEX_SIZE];
                uint64_t size;
                size_t n_files = 0;
                int r;

                if (strcmp(name, "-") == 0)
                        r = hash_fd(STDIN_FILENO, digest, &size);
                else if ((r = hash_file(name, digest, &size)) == -EISDIR &&
                         (r = hash_model_dir(name, digest, &size, &n_files)) < 0) {
                        status = EXIT_FAILED;   /* hash_model_dir() said why */
                        if (json)
                                json_array_append_new(results, json_pack("{s:s, s:s}", "file", name,
                                                                         "error", strerror(-r)));
                        continue;
                }
                if (r < 0) {
                        cli_error("%s: %s", name, strerror(-r));
                        status = EXIT_FAILED;
                        if (json)
                                json_array_append_new(results, json_pack("{s:s, s:s}", "file", name,
                                                                         "error", strerror(-r)));
                        continue;
                }

                sha256_to_hex(digest, hex);
                if (json) {
                        json_t *o = json_pack("{s:s, s:s, s:I}", "file", name, "sha256", hex, "size", (json_int_t) size);
                        if (n_files)
                                json_object_set_new(o, "files", json_integer((json_int_t) n_files));
                        json_array_append_new(results, o);
                } else
                        print_line(hex, name);
        }

        if (json) {
                json_dumpf(results, stdout, JSON_INDENT(2));
                fputc('\n', stdout);
                json_decref(results);
        }
        if (fflush(stdout) != 0 || ferror(stdout)) {
                cli_error("write error on standard output: %s", strerror(errno));
                status = EXIT_FAILED;
        }
        return status;
}
