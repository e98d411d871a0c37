/* SPDX-License-Identifier: MIT */
/*
 * The hawkBit DDI documents (daemon/taskpatchd-ddi.c): the controller resource,
 * deploymentBase and cancelAction as hawkBit documents them, every refusal
 * (missing fields, wrong types, bad ids, hrefs and hashes, the http:// rule),
 * each cap at its limit and one past it, the feedback and configData bodies
 * byte for byte, and messages that stay valid UTF-8.
 */

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "check-main.h"
#include "taskpatchd-ddi.h"

#define SHA "5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"
#define SHA_BYTE0 0x5f
#define URL "https://cdn.example.net/tenant/artifacts/"
#define ART_LINKS(name, links) \
        "{\"filename\":\"" name "\",\"size\":4096,\"hashes\":{\"sha1\":\"x\",\"md5\":\"y\",\"sha256\":\"" SHA \
        "\"},\"_links\":" links "}"
#define ART(name) ART_LINKS(name, "{\"download\":{\"href\":\"" URL name "\"},\"md5sum\":{\"href\":\"" URL "m\"}}")
#define CHUNK(arts) "{\"part\":\"tpb\",\"version\":\"3\",\"name\":\"taskpatch\",\"artifacts\":[" arts "]}"
#define DEP_WITH(dep) \
        "{\"id\":\"42\",\"deployment\":" dep ",\"actionHistory\":{\"status\":\"RUNNING\",\"messages\":[]}}"
#define DEP(chunks) DEP_WITH("{\"download\":\"forced\",\"update\":\"attempt\",\"chunks\":" chunks "}")

/* A value a parser must not touch when it refuses. */
#define POISON 0xa5

static bool utf8_ok(const char *s) {
        json_t *j = json_string(s);
        json_decref(j);
        return j != NULL;
}

/* The error path shared by every refusal: a code, a message naming @what, valid UTF-8, *ret untouched. */
static void assert_refused(int r, int code, const TpError *err, const char *what, const void *ret, size_t n,
                           const char *doc) {
        ck_assert_msg(r == code, "%.200s: returned %d, expected %d (%s)", doc, r, code, err->message);
        ck_assert_int_eq(err->code, code);
        ck_assert_msg(strstr(err->message, what), "%.200s: '%s' lacks '%s'", doc, err->message, what);
        ck_assert_msg(utf8_ok(err->message), "%.200s: message is not UTF-8", doc);
        for (size_t i = 0; i < n; i++)
                ck_assert_quiet(((const uint8_t *) ret)[i] == POISON, "%.200s: *ret touched at %zu", doc, i);
}

/* ---- the controller base resource ---- */

#define HB "https://hb.example.com/DEFAULT/controller/v1/dev-1/"

START_TEST(controller_documented) {
        const char *doc = "{\"config\":{\"polling\":{\"sleep\":\"12:00:00\"}},\"_links\":{"
                          "\"deploymentBase\":{\"href\":\"" HB "deploymentBase/5?c=-2129030598\"},"
                          "\"installedBase\":{\"href\":\"" HB "installedBase/4\"},"
                          "\"configData\":{\"href\":\"" HB "configData\"}}}";
        DdiController c = {};
        TpError err = {};

        ck_assert_int_eq(ddi_controller_parse(doc, strlen(doc), false, &c, &err), 0);
        ck_assert_uint_eq(c.sleep_usec, 12 * 3600 * 1000000ULL);
        ck_assert_str_eq(c.deployment_href, HB "deploymentBase/5?c=-2129030598");
        ck_assert_ptr_null(c.cancel_href);
        ck_assert(c.config_data);
        ddi_controller_done(&c);
        ck_assert_ptr_null(c.deployment_href);
        ddi_controller_done(NULL);
}
END_TEST

START_TEST(controller_valid) {
        static const struct {
                const char *doc;
                bool allow_http;
                uint64_t sleep_s;
                const char *deploy, *cancel;
                bool config_data;
        } cases[] = {
                { "{}", false, 0, NULL, NULL, false },
                { "{\"config\":{}}", false, 0, NULL, NULL, false },
                { "{\"config\":{\"polling\":{\"sleep\":\"00:00:00\"}}}", false, 0, NULL, NULL, false },
                { "{\"config\":{\"polling\":{\"sleep\":\"1:2:3\"}}}", false, 3723, NULL, NULL, false },
                { "{\"config\":{\"polling\":{\"sleep\":\"999:59:59\"}}}", false, 999 * 3600 + 3599, NULL, NULL, false },
                { "{\"config\":{\"polling\":{\"sleep\":\"00:05:00\"}},\"_links\":{}}", false, 300, NULL, NULL, false },
                { "{\"_links\":{\"configData\":null}}", false, 0, NULL, NULL, true },
                { "{\"_links\":{\"cancelAction\":{\"href\":\"https://h/c/7\"},"
                  "\"deploymentBase\":{\"href\":\"https://h/d/7\"}}}",
                  false, 0, "https://h/d/7", "https://h/c/7", false },
                { "{\"_links\":{\"deploymentBase\":{\"href\":\"HTTPS://H:8443/d\"}}}", false, 0, "HTTPS://H:8443/d",
                  NULL, false },
                { "{\"_links\":{\"deploymentBase\":{\"href\":\"http://h/d\"}}}", true, 0, "http://h/d", NULL, false },
                { "{\"_links\":{\"deploymentBase\":{\"href\":\"https://h/d\"},\"future\":{\"x\":1}},\"extra\":[]}",
                  false, 0, "https://h/d", NULL, false },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                DdiController c = {};
                TpError err = {};
                int r = ddi_controller_parse(cases[i].doc, strlen(cases[i].doc), cases[i].allow_http, &c, &err);
                ck_assert_msg(r == 0, "case %zu: %s", i, err.message);
                ck_assert_uint_eq(c.sleep_usec, cases[i].sleep_s * 1000000ULL);
                if (cases[i].deploy)
                        ck_assert_str_eq(c.deployment_href, cases[i].deploy);
                else
                        ck_assert_ptr_null(c.deployment_href);
                if (cases[i].cancel)
                        ck_assert_str_eq(c.cancel_href, cases[i].cancel);
                else
                        ck_assert_ptr_null(c.cancel_href);
                ck_assert_int_eq(c.config_data, cases[i].config_data);
                ddi_controller_done(&c);
        }
}
END_TEST

#define LINK(href) "{\"_links\":{\"deploymentBase\":{\"href\":\"" href "\"}}}"
#define SLEEP(s) "{\"config\":{\"polling\":{\"sleep\":" s "}}}"

START_TEST(controller_refusals) {
        static const struct {
                const char *doc;
                bool allow_http;
                int code;
                const char *message;
        } cases[] = {
                { "", false, -EBADMSG, "end of file" },
                { "[]", false, -EBADMSG, "expected a JSON object, found an array" },
                { "{", false, -EBADMSG, "expected near end of file" },
                { "{\"a\":1,\"a\":2}", false, -EBADMSG, "duplicate object key" },
                { "{} {}", false, -EBADMSG, "end of file expected" },
                { "{\"config\":1}", false, -EBADMSG, "config: expected an object, found an integer" },
                { "{\"config\":{\"polling\":[]}}", false, -EBADMSG,
                  "config.polling: expected an object, found an array" },
                { SLEEP("300"), false, -EBADMSG, "config.polling.sleep: expected a string, found an integer" },
                { SLEEP("\"5m\""), false, -EBADMSG, "config.polling.sleep: '5m' is not HH:MM:SS" },
                { SLEEP("\"00:60:00\""), false, -EBADMSG, "is not HH:MM:SS" },
                { SLEEP("\"00:00:60\""), false, -EBADMSG, "is not HH:MM:SS" },
                { SLEEP("\"1000:00:00\""), false, -EBADMSG, "is not HH:MM:SS (hours up to 999)" },
                { SLEEP("\"-1:00:00\""), false, -EBADMSG, "is not HH:MM:SS" },
                { SLEEP("\" 1:00:00\""), false, -EBADMSG, "is not HH:MM:SS" },
                { SLEEP("\"00:00:00x\""), false, -EBADMSG, "is not HH:MM:SS" },
                { SLEEP("\"00:00\""), false, -EBADMSG, "is not HH:MM:SS" },
                { SLEEP("\"00:000:00\""), false, -EBADMSG, "is not HH:MM:SS" },
                { SLEEP("\"\""), false, -EBADMSG, "is not HH:MM:SS" },
                { SLEEP("\"00000000:00:00:00\""), false, -E2BIG, "config.polling.sleep: 17 bytes, more than 16" },
                { "{\"_links\":\"x\"}", false, -EBADMSG, "_links: expected an object, found a string" },
                { "{\"_links\":{\"deploymentBase\":true}}", false, -EBADMSG,
                  "_links.deploymentBase: expected an object, found a boolean" },
                { "{\"_links\":{\"deploymentBase\":{}}}", false, -EBADMSG, "_links.deploymentBase.href: missing" },
                { "{\"_links\":{\"deploymentBase\":{\"href\":1.5}}}", false, -EBADMSG,
                  "_links.deploymentBase.href: expected a string, found a real number" },
                { LINK("http://h/d"), false, -EBADMSG,
                  "_links.deploymentBase.href: 'http://h/d' is not an https:// URL "
                  "(http:// only with channel.allow_http)" },
                { LINK("ftp://h/d"), true, -EBADMSG, "'ftp://h/d' is not an https:// URL (nor http://)" },
                { LINK("/DEFAULT/controller/v1/x/deploymentBase/1"), false, -EBADMSG, "is not an https:// URL" },
                { LINK("https:/h/d"), false, -EBADMSG, "is not an https:// URL" },
                { LINK("https://"), false, -EBADMSG, "'https://' names no host" },
                { LINK("https:///d"), false, -EBADMSG, "names no host" },
                { LINK("https://?x"), false, -EBADMSG, "names no host" },
                { LINK("https://h/a b"), false, -EBADMSG, "href: contains a space or control character (at byte 11)" },
                { LINK("https://h/a\\nb"), false, -EBADMSG, "contains a space or control character" },
                { LINK("https://h/a\\u007f"), false, -EBADMSG, "contains a space or control character" },
                { "{\"_links\":{\"cancelAction\":{\"href\":\"http://h/c\"}}}", false, -EBADMSG,
                  "_links.cancelAction.href: 'http://h/c' is not an https:// URL" },
                { "{\"_links\":{\"deploymentBase\":{\"href\":\"https://h/d\"},\"cancelAction\":[]}}", false, -EBADMSG,
                  "_links.cancelAction: expected an object, found an array" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                DdiController c;
                TpError err = {};
                memset(&c, POISON, sizeof(c));
                int r = ddi_controller_parse(cases[i].doc, strlen(cases[i].doc), cases[i].allow_http, &c, &err);
                assert_refused(r, cases[i].code, &err, cases[i].message, &c, sizeof(c), cases[i].doc);
        }
}
END_TEST

/* {"_links": {"deploymentBase": {"href": "https://h/<pad>"}}} with an href of exactly @n bytes. */
static char *controller_with_href(size_t n) {
        char *href = malloc(n + 1), *doc = NULL;
        ck_assert_ptr_nonnull(href);
        memset(href, 'a', n);
        memcpy(href, "https://h/", 10);
        href[n] = '\0';
        ck_assert_int_ge(asprintf(&doc, LINK("%s"), href), 0);
        free(href);
        return doc;
}

START_TEST(controller_caps) {
        char *doc = controller_with_href(DDI_URL_MAX);
        DdiController c = {};
        TpError err = {};

        ck_assert_int_eq(ddi_controller_parse(doc, strlen(doc), false, &c, &err), 0);
        ck_assert_uint_eq(strlen(c.deployment_href), DDI_URL_MAX);
        ddi_controller_done(&c);
        free(doc);

        doc = controller_with_href(DDI_URL_MAX + 1);
        memset(&c, POISON, sizeof(c));
        assert_refused(ddi_controller_parse(doc, strlen(doc), false, &c, &err), -E2BIG, &err,
                       "_links.deploymentBase.href: 4097 bytes, more than 4096", &c, sizeof(c), "href cap");
        free(doc);

        /* The body: "{}" and spaces, exactly DDI_BODY_MAX bytes, then one more. */
        char *body = malloc(DDI_BODY_MAX + 1);
        ck_assert_ptr_nonnull(body);
        memset(body, ' ', DDI_BODY_MAX + 1);
        body[0] = '{';
        body[1] = '}';
        ck_assert_int_eq(ddi_controller_parse(body, DDI_BODY_MAX, false, &c, &err), 0);
        ddi_controller_done(&c);
        memset(&c, POISON, sizeof(c));
        assert_refused(ddi_controller_parse(body, DDI_BODY_MAX + 1, false, &c, &err), -E2BIG, &err,
                       "1048577 bytes, more than the 1048576 a DDI document may hold", &c, sizeof(c), "body cap");
        free(body);
}
END_TEST

/* ---- deploymentBase ---- */

START_TEST(deployment_documented) {
        const char *doc = "{\"id\":\"42\",\"deployment\":{\"download\":\"forced\",\"update\":\"skip\","
                          "\"maintenanceWindow\":\"unavailable\",\"chunks\":["
                          "{\"part\":\"os\",\"version\":\"2024.1\",\"name\":\"rootfs\",\"artifacts\":["
                          "{\"filename\":\"rootfs.ext4.gz\",\"size\":1,\"hashes\":{\"md5\":\"z\"},\"_links\":{}}]},"
                          "{\"part\":\"meta\",\"version\":\"1\",\"name\":\"notes\"}," CHUNK(ART("json-3.tpb") "," ART(
                                  "shout-1.tpb")) "]},\"actionHistory\":{\"status\":\"RUNNING\",\"messages\":[\"x\"]}}";
        DdiDeployment d = {};
        TpError err = {};

        ck_assert_int_eq(ddi_deployment_parse(doc, strlen(doc), false, &d, &err), 0);
        ck_assert_int_eq(d.refused.code, 0);
        ck_assert_str_eq(d.id, "42");
        ck_assert_int_eq(d.download, DDI_HANDLING_FORCED);
        ck_assert_int_eq(d.update, DDI_HANDLING_SKIP);
        ck_assert_uint_eq(d.n_artifacts, 2);
        ck_assert_str_eq(d.artifacts[0].filename, "json-3.tpb");
        ck_assert_str_eq(d.artifacts[1].filename, "shout-1.tpb");
        ck_assert_str_eq(d.artifacts[1].url, URL "shout-1.tpb");
        ck_assert_uint_eq(d.artifacts[0].size, 4096);
        ck_assert_uint_eq(d.artifacts[0].sha256[0], SHA_BYTE0);
        ck_assert_uint_eq(d.artifacts[0].sha256[31], 0xef);
        ddi_deployment_done(&d);
        ck_assert_uint_eq(d.n_artifacts, 0);
        ck_assert_ptr_null(d.artifacts[0].url);
        ddi_deployment_done(NULL);
}
END_TEST

#define HTTP_ONLY(name) ART_LINKS(name, "{\"download-http\":{\"href\":\"http://cdn/" name "\"}}")

START_TEST(deployment_links) {
        static const struct {
                const char *doc;
                bool allow_http;
                const char *url;
                DdiHandling download, update;
        } cases[] = {
                { DEP("[" CHUNK(ART("a.tpb")) "]"), false, URL "a.tpb", DDI_HANDLING_FORCED, DDI_HANDLING_ATTEMPT },
                { DEP("[" CHUNK(HTTP_ONLY("a.tpb")) "]"), true, "http://cdn/a.tpb", DDI_HANDLING_FORCED,
                  DDI_HANDLING_ATTEMPT },
                /* download is preferred over download-http, and may itself be http:// when allowed */
                { DEP("[" CHUNK(ART_LINKS("a.tpb", "{\"download\":{\"href\":\"https://s/a\"},\"download-http\":{"
                                                  "\"href\":\"http://p/a\"}}")) "]"),
                  true, "https://s/a", DDI_HANDLING_FORCED, DDI_HANDLING_ATTEMPT },
                { DEP("[" CHUNK(ART_LINKS("a.tpb", "{\"download\":{\"href\":\"http://p/a\"}}")) "]"), true,
                  "http://p/a", DDI_HANDLING_FORCED, DDI_HANDLING_ATTEMPT },
                /* download-http is not looked at without allow_http, even when broken */
                { DEP("[" CHUNK(ART_LINKS("a.tpb",
                                          "{\"download\":{\"href\":\"https://s/a\"},\"download-http\":7}")) "]"),
                  false, "https://s/a", DDI_HANDLING_FORCED, DDI_HANDLING_ATTEMPT },
                { DEP_WITH("{\"chunks\":[" CHUNK(ART("a.tpb")) "]}"), false, URL "a.tpb", DDI_HANDLING_FORCED,
                  DDI_HANDLING_FORCED },
                { DEP_WITH("{\"download\":\"skip\",\"update\":\"skip\",\"chunks\":[" CHUNK(ART("a.tpb")) "]}"), false,
                  URL "a.tpb", DDI_HANDLING_SKIP, DDI_HANDLING_SKIP },
                /* a chunk without artifacts, a short or foreign name, an empty chunk list before ours */
                { DEP("[{\"part\":\"x\"}," CHUNK("{\"filename\":\".tpb\"},{\"filename\":\"a.tpbx\"}") "," CHUNK(
                          "") "," CHUNK(ART("a.tpb")) "]"),
                  false, URL "a.tpb", DDI_HANDLING_FORCED, DDI_HANDLING_ATTEMPT },
                /* size 0 */
                { DEP("[" CHUNK("{\"filename\":\"a.tpb\",\"size\":0,\"hashes\":{\"sha256\":\"" SHA
                                "\"},\"_links\":{\"download\":{\"href\":\"https://h/a\"}}}") "]"),
                  false, "https://h/a", DDI_HANDLING_FORCED, DDI_HANDLING_ATTEMPT },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                DdiDeployment d = {};
                TpError err = {};
                ck_assert_msg(ddi_deployment_parse(cases[i].doc, strlen(cases[i].doc), cases[i].allow_http, &d, &err) ==
                                      0,
                              "case %zu: %s", i, err.message);
                ck_assert_msg(d.refused.code == 0, "case %zu refused: %s", i, d.refused.message);
                ck_assert_uint_eq(d.n_artifacts, 1);
                ck_assert_str_eq(d.artifacts[0].filename, "a.tpb");
                ck_assert_str_eq(d.artifacts[0].url, cases[i].url);
                ck_assert_int_eq(d.download, cases[i].download);
                ck_assert_int_eq(d.update, cases[i].update);
                ddi_deployment_done(&d);
        }
}
END_TEST

/* No action named: the document is refused as a whole. */
START_TEST(deployment_envelope_refusals) {
        static const struct {
                const char *doc;
                int code;
                const char *message;
        } cases[] = {
                { "[1]", -EBADMSG, "expected a JSON object" },
                { "{\"id\":\"1\",\"id\":\"2\",\"deployment\":{}}", -EBADMSG, "duplicate object key" },
                { "{\"deployment\":{}}", -EBADMSG, "id: missing" },
                { "{\"id\":7,\"deployment\":{}}", -EBADMSG, "id: expected a string, found an integer" },
                { "{\"id\":\"\",\"deployment\":{}}", -EBADMSG, "id: '' is not an action id" },
                { "{\"id\":\"../7\",\"deployment\":{}}", -EBADMSG, "id: '../7' is not an action id (1 to 63 of" },
                { "{\"id\":\"7/feedback\",\"deployment\":{}}", -EBADMSG, "is not an action id" },
                { "{\"id\":\"7 8\",\"deployment\":{}}", -EBADMSG, "is not an action id" },
                { "{\"id\":\"1234567890123456789012345678901234567890123456789012345678901234\",\"deployment\":{}}",
                  -E2BIG, "id: 64 bytes, more than 63" },
                { "{\"id\":\"7\"}", -EBADMSG, "deployment: missing" },
                { "{\"id\":\"7\",\"deployment\":[]}", -EBADMSG, "deployment: expected an object, found an array" },
                { "{\"id\":\"7\",\"deployment\":null}", -EBADMSG, "deployment: expected an object, found null" },
                /* jansson refuses a NUL in a string: no href can hide one */
                { DEP("[" CHUNK(ART_LINKS("a.tpb", "{\"download\":{\"href\":\"https://h/a\\u0000\"}}")) "]"),
                  -EBADMSG, "\\u0000 is not allowed" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                DdiDeployment d;
                TpError err = {};
                memset(&d, POISON, sizeof(d));
                int r = ddi_deployment_parse(cases[i].doc, strlen(cases[i].doc), false, &d, &err);
                assert_refused(r, cases[i].code, &err, cases[i].message, &d, sizeof(d), cases[i].doc);
        }
}
END_TEST

#define ART_SIZE(name, size) \
        "{\"filename\":\"" name "\",\"size\":" size ",\"hashes\":{\"sha256\":\"" SHA \
        "\"},\"_links\":{\"download\":{\"href\":\"https://h/a\"}}}"
#define ART_SHA(sha) \
        "{\"filename\":\"a.tpb\",\"size\":1,\"hashes\":{\"sha256\":" sha \
        "},\"_links\":{\"download\":{\"href\":\"https://h/a\"}}}"

/* The action is named but cannot be carried out: parsed, with .refused saying why. */
START_TEST(deployment_content_refusals) {
        static const struct {
                const char *doc;
                bool allow_http;
                int code;
                const char *message;
        } cases[] = {
                { DEP_WITH("{\"download\":\"later\",\"chunks\":[]}"), false, -EBADMSG,
                  "deployment.download: 'later' is not skip, attempt or forced" },
                { DEP_WITH("{\"update\":\"Forced\",\"chunks\":[]}"), false, -EBADMSG,
                  "deployment.update: 'Forced' is not skip, attempt or forced" },
                { DEP_WITH("{\"update\":1}"), false, -EBADMSG,
                  "deployment.update: expected a string, found an integer" },
                { DEP_WITH("{}"), false, -ENOENT, "the deployment holds no .tpb artifact" },
                { DEP("[]"), false, -ENOENT, "the deployment holds no .tpb artifact" },
                { DEP("{}"), false, -EBADMSG, "deployment.chunks: expected an array, found an object" },
                { DEP("[1]"), false, -EBADMSG, "deployment.chunks[0]: expected an object, found an integer" },
                { DEP("[{},{\"artifacts\":\"x\"}]"), false, -EBADMSG,
                  "deployment.chunks[1].artifacts: expected an array, found a string" },
                { DEP("[" CHUNK("[]") "]"), false, -EBADMSG,
                  "deployment.chunks[0].artifacts[0]: expected an object, found an array" },
                { DEP("[" CHUNK("{}") "]"), false, -EBADMSG, "deployment.chunks[0].artifacts[0].filename: missing" },
                { DEP("[" CHUNK(ART("a.tpb") ",{\"filename\":5}") "]"), false, -EBADMSG,
                  "deployment.chunks[0].artifacts[1].filename: expected a string, found an integer" },
                { DEP("[" CHUNK("{\"filename\":\"rootfs.img\"}") "]"), false, -ENOENT, "holds no .tpb artifact" },
                { DEP("[" CHUNK(ART("../x.tpb")) "]"), false, -EBADMSG,
                  "artifact '../x.tpb': filename: not a plain file name (a '/' or a control character)" },
                { DEP("[" CHUNK(ART("a\\tb.tpb")) "]"), false, -EBADMSG, "filename: not a plain file name" },
                { DEP("[" CHUNK(ART("a.tpb")) "," CHUNK(ART("a.tpb")) "]"), false, -EBADMSG,
                  "artifact 'a.tpb': listed twice" },
                { DEP("[" CHUNK("{\"filename\":\"a.tpb\"}") "]"), false, -EBADMSG, "artifact 'a.tpb': size: missing" },
                { DEP("[" CHUNK(ART_SIZE("a.tpb", "\"12\"")) "]"), false, -EBADMSG,
                  "artifact 'a.tpb': size: expected an integer, found a string" },
                { DEP("[" CHUNK(ART_SIZE("a.tpb", "1.5")) "]"), false, -EBADMSG,
                  "size: expected an integer, found a real" },
                { DEP("[" CHUNK(ART_SIZE("a.tpb", "1e30")) "]"), false, -EBADMSG, "size: expected an integer" },
                { DEP("[" CHUNK(ART_SIZE("a.tpb", "-1")) "]"), false, -EBADMSG,
                  "artifact 'a.tpb': size: -1 is negative" },
                { DEP("[" CHUNK("{\"filename\":\"a.tpb\",\"size\":1}") "]"), false, -EBADMSG,
                  "artifact 'a.tpb': hashes: missing" },
                { DEP("[" CHUNK("{\"filename\":\"a.tpb\",\"size\":1,\"hashes\":[]}") "]"), false, -EBADMSG,
                  "artifact 'a.tpb': hashes: expected an object, found an array" },
                { DEP("[" CHUNK("{\"filename\":\"a.tpb\",\"size\":1,\"hashes\":{\"md5\":\"x\"}}") "]"), false, -EBADMSG,
                  "artifact 'a.tpb': hashes.sha256: missing" },
                { DEP("[" CHUNK(ART_SHA("null")) "]"), false, -EBADMSG,
                  "hashes.sha256: expected a string, found null" },
                { DEP("[" CHUNK(ART_SHA("\"5F70BF18A086007016E948B04AED3B82103A36BEA41755B6CDDFAF10ACE3C6EF\"")) "]"),
                  false, -EBADMSG,
                  "hashes.sha256: '5F70BF18A086007016E948B04AED3B82103A36BEA41755B6CDDFAF10ACE3C6EF' is not 64 "
                  "lowercase hex digits" },
                { DEP("[" CHUNK(ART_SHA("\"5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6e\"")) "]"),
                  false, -EBADMSG, "is not 64 lowercase hex digits" },
                { DEP("[" CHUNK(ART_SHA("\"5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6efa\"")) "]"),
                  false, -EBADMSG, "is not 64 lowercase hex digits" },
                { DEP("[" CHUNK(ART_SHA("\"5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6eg\"")) "]"),
                  false, -EBADMSG, "is not 64 lowercase hex digits" },
                { DEP("[" CHUNK("{\"filename\":\"a.tpb\",\"size\":1,\"hashes\":{\"sha256\":\"" SHA "\"}}") "]"), false,
                  -EBADMSG, "artifact 'a.tpb': _links: missing" },
                { DEP("[" CHUNK(ART_LINKS("a.tpb", "{}")) "]"), false, -EBADMSG,
                  "artifact 'a.tpb': _links: no download link (download; download-http needs channel.allow_http)" },
                { DEP("[" CHUNK(ART_LINKS("a.tpb", "{}")) "]"), true, -EBADMSG,
                  "_links: no download link (download or download-http)" },
                { DEP("[" CHUNK(HTTP_ONLY("a.tpb")) "]"), false, -EBADMSG, "_links: no download link" },
                { DEP("[" CHUNK(ART_LINKS("a.tpb", "{\"download\":{\"href\":\"http://cdn/a\"}}")) "]"), false, -EBADMSG,
                  "artifact 'a.tpb': _links.download.href: 'http://cdn/a' is not an https:// URL" },
                { DEP("[" CHUNK(ART_LINKS("a.tpb", "{\"download-http\":{\"href\":\"ftp://cdn/a\"}}")) "]"), true,
                  -EBADMSG, "_links.download-http.href: 'ftp://cdn/a' is not an https:// URL (nor http://)" },
                { DEP("[" CHUNK(ART_LINKS("a.tpb", "{\"download\":{}}")) "]"), false, -EBADMSG,
                  "artifact 'a.tpb': _links.download.href: missing" },
                { DEP("[" CHUNK(ART_LINKS("a.tpb", "{\"download\":\"https://h/a\"}")) "]"), false, -EBADMSG,
                  "_links.download: expected an object, found a string" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                DdiDeployment d;
                TpError err = {};
                memset(&d, POISON, sizeof(d));
                int r = ddi_deployment_parse(cases[i].doc, strlen(cases[i].doc), cases[i].allow_http, &d, &err);
                ck_assert_msg(r == 0, "case %zu: %s", i, err.message);
                ck_assert_str_eq(d.id, "42");
                ck_assert_msg(d.refused.code == cases[i].code, "case %zu: code %d (%s)", i, d.refused.code,
                              d.refused.message);
                ck_assert_msg(strstr(d.refused.message, cases[i].message), "case %zu: '%s' lacks '%s'", i,
                              d.refused.message, cases[i].message);
                ck_assert_uint_eq(d.n_artifacts, 0);
                for (size_t k = 0; k < DDI_ARTIFACTS_MAX; k++)
                        ck_assert_ptr_null(d.artifacts[k].url);
                ddi_deployment_done(&d);
        }
}
END_TEST

#define MCHUNK(meta, arts) \
        "{\"part\":\"tpb\",\"version\":\"3\",\"name\":\"taskpatch\",\"metadata\":" meta ",\"artifacts\":[" arts "]}"
#define MODEL(m) "[{\"key\":\"other\",\"value\":\"x\"},{\"key\":\"taskpatch.model\",\"value\":\"" m "\"}]"

/* A chunk's metadata "taskpatch.model" names the model of its bundles. */
START_TEST(deployment_models) {
        const char *doc = DEP("[" MCHUNK(MODEL("llm"), ART("a.tpb") "," ART("b.tpb")) "," CHUNK(ART("c.tpb")) ","
                              MCHUNK("[]", ART("d.tpb")) ","
                              MCHUNK("[{\"key\":\"taskpatch.model\",\"value\":\"Raspberry Pi\"}]",
                                     "{\"filename\":\"os.img\"}") "]");
        DdiDeployment d;
        TpError err = {};

        ck_assert_int_eq(ddi_deployment_parse(doc, strlen(doc), false, &d, &err), 0);
        ck_assert_msg(d.refused.code == 0, "%s", d.refused.message);
        ck_assert_uint_eq(d.n_artifacts, 4);
        ck_assert_str_eq(d.artifacts[0].model, "llm");
        ck_assert_str_eq(d.artifacts[1].model, "llm");
        ck_assert_str_eq(d.artifacts[2].model, "");            /* no metadata: the first model */
        ck_assert_str_eq(d.artifacts[3].model, "");
        ddi_deployment_done(&d);

        static const struct {
                const char *doc, *message;
        } bad[] = {
                { DEP("[" MCHUNK("{}", ART("a.tpb")) "]"), "deployment.chunks[0].metadata: expected an array" },
                { DEP("[" MCHUNK("[1]", ART("a.tpb")) "]"), "deployment.chunks[0].metadata[0]: expected an object" },
                { DEP("[" MCHUNK("[{\"value\":\"x\"}]", ART("a.tpb")) "]"), "metadata[0].key: missing" },
                { DEP("[" MCHUNK(MODEL("Bad Name"), ART("a.tpb")) "]"),
                  "metadata[1].value: 'Bad Name' is not a model name" },
                { DEP("[" MCHUNK("[{\"key\":\"taskpatch.model\",\"value\":\"a\"},{\"key\":\"taskpatch.model\","
                                 "\"value\":\"b\"}]", ART("a.tpb")) "]"), "a second 'taskpatch.model' entry" },
                { DEP("[" MCHUNK("[{\"key\":\"taskpatch.model\"}]", ART("a.tpb")) "]"), "'' is not a model name" },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                memset(&d, POISON, sizeof(d));
                ck_assert_int_eq(ddi_deployment_parse(bad[i].doc, strlen(bad[i].doc), false, &d, &err), 0);
                ck_assert_msg(d.refused.code == -EBADMSG && strstr(d.refused.message, bad[i].message),
                              "case %zu: %d '%s' lacks '%s'", i, d.refused.code, d.refused.message, bad[i].message);
                ck_assert_uint_eq(d.n_artifacts, 0);
                ddi_deployment_done(&d);
        }
}
END_TEST

/* What the client follows for an action in progress: update, even when the chunks are refused. */
START_TEST(deployment_update_kept_when_refused) {
        const char *doc = DEP_WITH("{\"download\":\"forced\",\"update\":\"skip\",\"chunks\":7}");
        DdiDeployment d = {};
        TpError err = {};

        ck_assert_int_eq(ddi_deployment_parse(doc, strlen(doc), false, &d, &err), 0);
        ck_assert_int_eq(d.refused.code, -EBADMSG);
        ck_assert_int_eq(d.update, DDI_HANDLING_SKIP);
        doc = DEP_WITH("{\"download\":\"sometimes\",\"update\":\"skip\"}");
        ck_assert_int_eq(ddi_deployment_parse(doc, strlen(doc), false, &d, &err), 0);
        ck_assert_int_eq(d.download, _DDI_HANDLING_INVALID);
        ck_assert_int_eq(d.update, DDI_HANDLING_SKIP);
        ck_assert_msg(strstr(d.refused.message, "deployment.download"), "%s", d.refused.message);
        ddi_deployment_done(&d);
}
END_TEST

/* A deployment of @chunks chunks, each with @per artifacts; @tpb of all of them are .tpb ones (the first). */
static char *deployment_doc(size_t chunks, size_t per, size_t tpb, size_t name_len) {
        json_t *list = json_array();
        size_t n = 0;

        for (size_t c = 0; c < chunks; c++) {
                json_t *arts = json_array();
                for (size_t k = 0; k < per; k++, n++) {
                        char name[512];
                        int len = snprintf(name, sizeof(name), "%zu-", n);
                        memset(name + len, 'x', name_len - (size_t) len);
                        memcpy(name + name_len - 4, n < tpb ? ".tpb" : ".bin", 5);
                        json_array_append_new(arts, json_pack("{s:s, s:i, s:{s:s}, s:{s:{s:s}}}", "filename", name,
                                                              "size", 10, "hashes", "sha256", SHA, "_links", "download",
                                                              "href", "https://h/x"));
                }
                json_array_append_new(list, json_pack("{s:s, s:o}", "part", "tpb", "artifacts", arts));
        }
        json_t *doc = json_pack("{s:s, s:{s:s, s:s, s:o}}", "id", "9", "deployment", "download", "forced", "update",
                                "forced", "chunks", list);
        char *text = json_dumps(doc, JSON_COMPACT);
        ck_assert_ptr_nonnull(text);
        json_decref(doc);
        return text;
}

static void expect_deployment(char *doc, int code, const char *message, size_t n_artifacts) {
        DdiDeployment d = {};
        TpError err = {};

        ck_assert_int_eq(ddi_deployment_parse(doc, strlen(doc), false, &d, &err), 0);
        ck_assert_msg(d.refused.code == code, "code %d: %s", d.refused.code, d.refused.message);
        if (message)
                ck_assert_msg(strstr(d.refused.message, message), "'%s' lacks '%s'", d.refused.message, message);
        ck_assert_msg(utf8_ok(d.refused.message), "not UTF-8");
        ck_assert_uint_eq(d.n_artifacts, n_artifacts);
        ddi_deployment_done(&d);
        free(doc);
}

START_TEST(deployment_caps) {
        /* .tpb artifacts: 16 over 4 chunks, then 17 */
        expect_deployment(deployment_doc(4, 4, 16, 20), 0, NULL, 16);
        expect_deployment(deployment_doc(5, 4, 17, 20), -E2BIG, "artifact '16-", 0);
        expect_deployment(deployment_doc(5, 4, 17, 20), -E2BIG, "more than 16 .tpb artifacts in one deployment", 0);
        /* chunks */
        expect_deployment(deployment_doc(DDI_CHUNKS_MAX, 1, 1, 20), 0, NULL, 1);
        expect_deployment(deployment_doc(DDI_CHUNKS_MAX + 1, 1, 1, 20), -E2BIG,
                          "deployment.chunks: 65 chunks, more than 64", 0);
        /* artifacts in one chunk, ours or not */
        expect_deployment(deployment_doc(1, DDI_CHUNK_ARTIFACTS_MAX, 1, 20), 0, NULL, 1);
        expect_deployment(deployment_doc(1, DDI_CHUNK_ARTIFACTS_MAX + 1, 1, 20), -E2BIG,
                          "deployment.chunks[0].artifacts: 65 artifacts, more than 64", 0);
        /* file names: 255 bytes, then 256 */
        expect_deployment(deployment_doc(1, 1, 1, DDI_FILENAME_MAX), 0, NULL, 1);
        expect_deployment(deployment_doc(1, 1, 1, DDI_FILENAME_MAX + 1), -E2BIG, "filename: 256 bytes, more than 255",
                          0);
        /* sizes: the largest JSON integer */
        DdiDeployment d = {};
        TpError err = {};
        const char *big = DEP("[" CHUNK(ART_SIZE("a.tpb", "9223372036854775807")) "]");
        ck_assert_int_eq(ddi_deployment_parse(big, strlen(big), false, &d, &err), 0);
        ck_assert_uint_eq(d.artifacts[0].size, INT64_MAX);
        ddi_deployment_done(&d);
        /* a foreign artifact's name is not capped: it is skipped */
        char foreign[301], *doc = NULL;
        memset(foreign, 'f', 300);
        foreign[300] = '\0';
        ck_assert_int_ge(asprintf(&doc, DEP("[" CHUNK("{\"filename\":\"%s\"}," ART("a.tpb")) "]"), foreign), 0);
        expect_deployment(doc, 0, NULL, 1);
}
END_TEST

START_TEST(messages_stay_utf8) {
        /* A name of 3-byte characters cut at 64 bytes in "artifact '%.64s'", and a control character in it. */
        char name[128] = "", *doc = NULL;
        DdiDeployment d = {};
        TpError err = {};

        for (size_t i = 0; i < 30; i++)
                memcpy(name + 3 * i, "\xe2\x82\xac", 4);
        ck_assert_int_ge(asprintf(&doc, DEP("[" CHUNK(ART_LINKS("%s\\u0001.tpb", "{}")) "]"), name), 0);
        ck_assert_int_eq(ddi_deployment_parse(doc, strlen(doc), false, &d, &err), 0);
        ck_assert_msg(strstr(d.refused.message, "not a plain file name"), "%s", d.refused.message);
        ck_assert(utf8_ok(d.refused.message));
        ddi_deployment_done(&d);
        free(doc);
        /* jansson's own error text may quote part of a broken sequence */
        const char *bad = "{\"id\":\"\xe2\x82\"}";
        ck_assert_int_eq(ddi_deployment_parse(bad, strlen(bad), false, &d, &err), -EBADMSG);
        ck_assert_msg(utf8_ok(err.message), "%s", err.message);
        bad = "{\"\\ud800\":1}";
        ck_assert_int_eq(ddi_cancel_parse(bad, strlen(bad), &(DdiCancel) {}, &err), -EBADMSG);
        ck_assert_msg(utf8_ok(err.message), "%s", err.message);
}
END_TEST

/* ---- cancelAction ---- */

START_TEST(cancel) {
        static const struct {
                const char *doc;
                int code;
                const char *message;
        } cases[] = {
                { "{\"id\":\"11\",\"cancelAction\":{\"stopId\":\"10\"}}", 0, NULL },
                { "{\"cancelAction\":{\"stopId\":\"10\"}}", -EBADMSG, "id: missing" },
                { "{\"id\":11,\"cancelAction\":{\"stopId\":\"10\"}}", -EBADMSG,
                  "id: expected a string, found an integer" },
                { "{\"id\":\"11\"}", -EBADMSG, "cancelAction: missing" },
                { "{\"id\":\"11\",\"cancelAction\":[\"10\"]}", -EBADMSG,
                  "cancelAction: expected an object, found an array" },
                { "{\"id\":\"11\",\"cancelAction\":{}}", -EBADMSG, "cancelAction.stopId: missing" },
                { "{\"id\":\"11\",\"cancelAction\":{\"stopId\":10}}", -EBADMSG,
                  "cancelAction.stopId: expected a string" },
                { "{\"id\":\"11\",\"cancelAction\":{\"stopId\":\"\"}}", -EBADMSG,
                  "cancelAction.stopId: '' is not an action id" },
                { "{\"id\":\"1/1\",\"cancelAction\":{\"stopId\":\"10\"}}", -EBADMSG, "id: '1/1' is not an action id" },
                { "{\"id\":\"11\",\"cancelAction\":{\"stopId\":"
                  "\"1234567890123456789012345678901234567890123456789012345678901234\"}}",
                  -E2BIG, "cancelAction.stopId: 64 bytes, more than 63" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                DdiCancel c;
                TpError err = {};
                memset(&c, POISON, sizeof(c));
                int r = ddi_cancel_parse(cases[i].doc, strlen(cases[i].doc), &c, &err);
                if (cases[i].code == 0) {
                        ck_assert_msg(r == 0, "%s", err.message);
                        ck_assert_str_eq(c.id, "11");
                        ck_assert_str_eq(c.stop_id, "10");
                        continue;
                }
                assert_refused(r, cases[i].code, &err, cases[i].message, &c, sizeof(c), cases[i].doc);
        }
        /* 63 characters: the longest id */
        const char *doc = "{\"id\":\"123456789012345678901234567890123456789012345678901234567890123\","
                          "\"cancelAction\":{\"stopId\":\"A-_z\"}}";
        DdiCancel c = {};
        TpError err = {};
        ck_assert_int_eq(ddi_cancel_parse(doc, strlen(doc), &c, &err), 0);
        ck_assert_uint_eq(strlen(c.id), DDI_ID_MAX);
        ck_assert_str_eq(c.stop_id, "A-_z");
}
END_TEST

/* ---- what the device sends ---- */

static void expect_json(json_t *j, const char *text) {
        ck_assert_ptr_nonnull(j);
        char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
        ck_assert_str_eq(s, text);
        free(s);
        json_decref(j);
}

START_TEST(builders) {
        expect_json(ddi_feedback_new("7", DDI_EXECUTION_CLOSED, DDI_FINISHED_SUCCESS, "committed"),
                    "{\"id\":\"7\",\"status\":{\"details\":[\"committed\"],\"execution\":\"closed\",\"result\":{"
                    "\"finished\":\"success\"}}}");
        expect_json(ddi_feedback_new("7", DDI_EXECUTION_PROCEEDING, DDI_FINISHED_NONE, ""),
                    "{\"id\":\"7\",\"status\":{\"details\":[],\"execution\":\"proceeding\",\"result\":{\"finished\":"
                    "\"none\"}}}");
        expect_json(ddi_feedback_new("12", DDI_EXECUTION_REJECTED, DDI_FINISHED_NONE, NULL),
                    "{\"id\":\"12\",\"status\":{\"details\":[],\"execution\":\"rejected\",\"result\":{\"finished\":"
                    "\"none\"}}}");
        expect_json(ddi_feedback_new("7", DDI_EXECUTION_CLOSED, DDI_FINISHED_FAILURE, "\xff broken"),
                    "{\"id\":\"7\",\"status\":{\"details\":[],\"execution\":\"closed\",\"result\":{\"finished\":"
                    "\"failure\"}}}");
        ck_assert_ptr_null(ddi_feedback_new("7", _DDI_EXECUTION_MAX, DDI_FINISHED_NONE, NULL));
        ck_assert_ptr_null(ddi_feedback_new("7", DDI_EXECUTION_CLOSED, _DDI_FINISHED_INVALID, NULL));
        ck_assert_ptr_null(ddi_feedback_new(NULL, DDI_EXECUTION_CLOSED, DDI_FINISHED_NONE, NULL));
        expect_json(ddi_config_data_new(json_pack("{s:s, s:s}", "cpu_arch", "aarch64", "active_task", "base")),
                    "{\"data\":{\"active_task\":\"base\",\"cpu_arch\":\"aarch64\"},\"mode\":\"merge\"}");
        ck_assert_ptr_null(ddi_config_data_new(NULL));
}
END_TEST

START_TEST(names) {
        static const char *const executions[] = { "closed", "proceeding", "canceled", "scheduled",
                                                  "rejected", "resumed", "downloaded", "download" };
        ck_assert_uint_eq(ELEMENTSOF(executions), _DDI_EXECUTION_MAX);
        for (DdiExecution e = 0; e < _DDI_EXECUTION_MAX; e++)
                ck_assert_str_eq(ddi_execution_to_string(e), executions[e]);
        ck_assert_ptr_null(ddi_execution_to_string(_DDI_EXECUTION_INVALID));
        ck_assert_str_eq(ddi_finished_to_string(DDI_FINISHED_NONE), "none");
        ck_assert_ptr_null(ddi_finished_to_string(_DDI_FINISHED_MAX));
        for (DdiHandling h = 0; h < _DDI_HANDLING_MAX; h++)
                ck_assert_int_eq(ddi_handling_from_string(ddi_handling_to_string(h)), h);
        ck_assert_int_eq(ddi_handling_from_string("FORCED"), _DDI_HANDLING_INVALID);
        ck_assert_int_eq(ddi_handling_from_string(NULL), _DDI_HANDLING_INVALID);
        ck_assert_ptr_null(ddi_handling_to_string(_DDI_HANDLING_INVALID));
        ck_assert(ddi_id_valid("0"));
        ck_assert(!ddi_id_valid(""));
        ck_assert(!ddi_id_valid("a.b"));
}
END_TEST

static Suite *ddi_suite(void) {
        Suite *s = suite_create("ddi");
        TCase *tc = tcase_create("ddi");
        tcase_add_test(tc, controller_documented);
        tcase_add_test(tc, controller_valid);
        tcase_add_test(tc, controller_refusals);
        tcase_add_test(tc, controller_caps);
        tcase_add_test(tc, deployment_documented);
        tcase_add_test(tc, deployment_links);
        tcase_add_test(tc, deployment_envelope_refusals);
        tcase_add_test(tc, deployment_content_refusals);
        tcase_add_test(tc, deployment_models);
        tcase_add_test(tc, deployment_update_kept_when_refused);
        tcase_add_test(tc, deployment_caps);
        tcase_add_test(tc, messages_stay_utf8);
        tcase_add_test(tc, cancel);
        tcase_add_test(tc, builders);
        tcase_add_test(tc, names);
        suite_add_tcase(s, tc);
        return s;
}

CHECK_MAIN(ddi_suite)
