/* SPDX-License-Identifier: MIT */
/*
 * fake-systemd LOG: a stand-in for systemd's manager object on a private D-Bus bus, for the
 * notify tests (systemd is not PID 1 on the test machines). It owns org.freedesktop.systemd1 on
 * the bus of $DBUS_SYSTEM_BUS_ADDRESS, answers RestartUnit(ss) and ReloadOrRestartUnit(ss) with
 * a job path, appends "METHOD UNIT MODE" to LOG for each call, and answers a unit named
 * "missing.service" with org.freedesktop.systemd1.NoSuchUnit, as systemd does. Prints "ready"
 * once the name is owned.
 */

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <systemd/sd-bus.h>

static const char *log_path;
static unsigned jobs;

static int on_call(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        const char *unit, *mode, *method = sd_bus_message_get_member(m);
        char job[64];
        FILE *f;
        int r;
        (void) userdata;

        if ((r = sd_bus_message_read(m, "ss", &unit, &mode)) < 0)
                return r;
        if ((f = fopen(log_path, "ae"))) {
                fprintf(f, "%s %s %s\n", method, unit, mode);
                fclose(f);
        }
        if (strcmp(unit, "missing.service") == 0)
                return sd_bus_error_setf(ret_error, "org.freedesktop.systemd1.NoSuchUnit", "Unit %s not found.", unit);
        snprintf(job, sizeof(job), "/org/freedesktop/systemd1/job/%u", ++jobs);
        return sd_bus_reply_method_return(m, "o", job);
}

static const sd_bus_vtable manager_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD("RestartUnit", "ss", "o", on_call, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD("ReloadOrRestartUnit", "ss", "o", on_call, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END,
};

int main(int argc, char *argv[]) {
        sd_bus *bus = NULL;
        int r;

        if (argc != 2) {
                fprintf(stderr, "usage: fake-systemd LOG (bus: $DBUS_SYSTEM_BUS_ADDRESS)\n");
                return 2;
        }
        log_path = argv[1];
        if ((r = sd_bus_open_system(&bus)) < 0 ||
            (r = sd_bus_add_object_vtable(bus, NULL, "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager",
                                          manager_vtable, NULL)) < 0 ||
            (r = sd_bus_request_name(bus, "org.freedesktop.systemd1", 0)) < 0) {
                fprintf(stderr, "fake-systemd: %s\n", strerror(-r));
                return 1;
        }
        printf("ready\n");
        fflush(stdout);
        for (;;) {
                r = sd_bus_process(bus, NULL);
                if (r < 0)
                        break;
                if (r == 0 && (r = sd_bus_wait(bus, UINT64_MAX)) < 0)
                        break;
        }
        sd_bus_flush_close_unref(bus);
        return r < 0 && r != -ECONNRESET ? 1 : 0;
}
