/* SPDX-License-Identifier: MIT */
/* What the update sources share (taskpatchd-source.h). */

#include <stdio.h>
#include <string.h>

#include "jsonline.h"
#include "taskpatchd-log.h"
#include "taskpatchd-source.h"

static const char *const origin_names[_ORIGIN_MAX] = {
        [ORIGIN_SOCKET] = "socket",
        [ORIGIN_CHANNEL] = "channel",
        [ORIGIN_HAWKBIT] = "hawkbit",
        [ORIGIN_SPOOL] = "spool",
        [ORIGIN_DAEMON] = "daemon",
};

const char *update_origin_to_string(UpdateOrigin o) {
        return o >= 0 && o < _ORIGIN_MAX ? origin_names[o] : NULL;
}

const char *source_target_model(const SourceTarget *t) {
        return t->config->model ? t->config->model : CONFIG_DEFAULT_MODEL;
}

size_t source_target_find(const SourceTarget *targets, size_t n, const char *name) {
        size_t i = 0;

        while (i < n && strcmp(source_target_model(&targets[i]), name) != 0)
                i++;
        return i;
}

void source_target_names(const SourceTarget *targets, size_t n, char *buf, size_t size) {
        size_t len = 0;

        buf[0] = '\0';
        for (size_t i = 0; i < n && len < size; i++)
                len += (size_t) snprintf(buf + len, size - len, "%s%s", i ? ", " : "", source_target_model(&targets[i]));
}

void source_error(const SourceHost *host, const char *name, char *buf, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(buf, TP_ERROR_MAX, fmt, ap);
        va_end(ap);
        jsonline_scrub_utf8(buf);       /* cut at a byte count; it goes into status JSON */
        log_warning("%s: %s", name, buf);
        host->report_error(host, name, buf, "fetch");
}
