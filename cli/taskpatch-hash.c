/* SPDX-License-Identifier: MIT */
/* taskpatch hash: SHA-256 of files, printed exactly as sha256sum prints it. */

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "hashfile.h"
#include "taskpatch.h"

static void help(void) {
        printf("Usage: taskpatch hash [--json] [FILE...]\n"
               "\n"
               "Print the SHA-256 of each FILE as sha256sum does ('<hex>  <name>').\n"
               "With no FILE, or when FILE is -, read standard input.\n"
               "An unreadable FILE is reported on stderr; the others are still hashed.\n"
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
                int r;

                if (strcmp(name, "-") == 0)
                        r = hash_fd(STDIN_FILENO, digest, &size);
                else
                        r = hash_file(name, digest, &size);
                if (r < 0) {
                        cli_error("%s: %s", name, strerror(-r));
                        status = EXIT_FAILED;
                        if (json)
                                json_array_append_new(results, json_pack("{s:s, s:s}", "file", name,
                                                                         "error", strerror(-r)));
                        continue;
                }

                sha256_to_hex(digest, hex);
                if (json)
                        json_array_append_new(results, json_pack("{s:s, s:s, s:I}", "file", name, "sha256", hex,
                                                                 "size", (json_int_t) size));
                else
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
