/* SPDX-License-Identifier: MIT */
/* What the update sources share (taskpatchd-source.h). */

#include <stdio.h>

#include "jsonline.h"
#include "taskpatchd-log.h"
#include "taskpatchd-source.h"

static const char *const origin_names[_ORIGIN_MAX] = {
        [ORIGIN_SOCKET] = "socket",
        [ORIGIN_CHANNEL] = "channel",
        [ORIGIN_HAWKBIT] = "hawkbit",
        [ORIGIN_SPOOL] = "spool",
};

const char *update_origin_to_string(UpdateOrigin o) {
        return o >= 0 && o < _ORIGIN_MAX ? origin_names[o] : NULL;
}

const char *source_target_model(const SourceTarget *t) {
        return t->config->model ? t->config->model : CONFIG_DEFAULT_MODEL;
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
