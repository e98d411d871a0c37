/* SPDX-License-Identifier: MIT */

/*
 * curl's multi-socket API on sd-event. curl calls glue_socket_cb() to say which
 * sockets it wants watched (one sd-event IO source per socket, remembered with
 * curl_multi_assign()) and glue_timer_cb() to say when it next wants to be woken
 * (one CLOCK_BOOTTIME source). Our IO and timer handlers hand the event back
 * with curl_multi_socket_action() and then drain curl_multi_info_read().
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

#include "taskpatchd-curl.h"

typedef struct Transfer Transfer;
struct Transfer {
        CURL *easy;
        CurlDone done;
        void *userdata;
        Transfer *next;
};

/* One socket curl asked us to watch. */
typedef struct Watch Watch;
struct Watch {
        sd_event_source *source;
        Watch *prev, *next;
};

struct CurlGlue {
        sd_event *event;
        CURLM *multi;
        sd_event_source *timer;
        Transfer *transfers;
        Watch *watches;
        unsigned dispatching;   /* our handlers on the stack: free must wait until they return */
        bool freeing;           /* curl_glue_free() was called: no new sources, no more callbacks */
};

static int curlm_to_errno(CURLMcode mc) {
        switch (mc) {
        case CURLM_OK:
                return 0;
        case CURLM_OUT_OF_MEMORY:
                return -ENOMEM;
        case CURLM_ADDED_ALREADY:
                return -EBUSY;
        case CURLM_BAD_HANDLE:
        case CURLM_BAD_EASY_HANDLE:
                return -EINVAL;
        default:
                return -EIO;
        }
}

static void watch_free(CurlGlue *g, Watch *w) {
        if (w->prev)
                w->prev->next = w->next;
        else
                g->watches = w->next;
        if (w->next)
                w->next->prev = w->prev;
        /* Safe even from this source's own handler: sd-event only disconnects a dispatching source. */
        sd_event_source_unref(w->source);
        free(w);
}

/* Unlink the transfer of @easy; NULL if the glue does not run it (any more). */
static Transfer *transfer_take(CurlGlue *g, CURL *easy) {
        for (Transfer **p = &g->transfers; *p; p = &(*p)->next)
                if ((*p)->easy == easy) {
                        Transfer *t = *p;
                        *p = t->next;
                        return t;
                }
        return NULL;
}

static void glue_destroy(CurlGlue *g) {
        /* curl may still report sockets as removed while it closes its connection cache. */
        if (g->multi)
                curl_multi_cleanup(g->multi);
        while (g->watches)
                watch_free(g, g->watches);
        sd_event_source_unref(g->timer);
        sd_event_unref(g->event);
        free(g);
        curl_global_cleanup();
}

/* Deliver every finished transfer. Each is removed from the multi handle before its
 * callback runs, so the callback may remove others, add new ones or free the glue. */
static void glue_read_done(CurlGlue *g) {
        CURLMsg *m;
        int left;

        while (!g->freeing && (m = curl_multi_info_read(g->multi, &left))) {
                if (m->msg != CURLMSG_DONE)
                        continue;

                CURL *easy = m->easy_handle;
                CURLcode result = m->data.result;
                Transfer *t = transfer_take(g, easy);
                if (!t)
                        continue;

                (void) curl_multi_remove_handle(g->multi, easy);
                CurlDone done = t->done;
                void *userdata = t->userdata;
                free(t);
                done(g, easy, result, userdata);
        }
}

static void glue_action(CurlGlue *g, curl_socket_t fd, int mask) {
        int running;

        g->dispatching++;
        /* A failure here is per transfer and comes back through curl_multi_info_read(). */
        (void) curl_multi_socket_action(g->multi, fd, mask, &running);
        glue_read_done(g);
        g->dispatching--;

        if (g->freeing && g->dispatching == 0)
                glue_destroy(g);
}

static int glue_on_io(sd_event_source *s _unused_, int fd, uint32_t revents, void *userdata) {
        int mask = 0;

        if (revents & (EPOLLIN | EPOLLHUP | EPOLLRDHUP))
                mask |= CURL_CSELECT_IN;
        if (revents & EPOLLOUT)
                mask |= CURL_CSELECT_OUT;
        if (revents & EPOLLERR)
                mask |= CURL_CSELECT_ERR;
        glue_action(userdata, fd, mask);
        return 0;
}

static int glue_on_timer(sd_event_source *s _unused_, uint64_t usec _unused_, void *userdata) {
        glue_action(userdata, CURL_SOCKET_TIMEOUT, 0);
        return 0;
}

/* CURLMOPT_SOCKETFUNCTION: 0 on success, -1 makes curl fail the transfer. */
static int glue_socket_cb(CURL *easy _unused_, curl_socket_t fd, int what, void *userp, void *socketp) {
        CurlGlue *g = userp;
        Watch *w = socketp;
        uint32_t events = 0;

        if (what == CURL_POLL_REMOVE) {
                /* curl says so before it closes the socket, so the number is not reused under us. */
                if (w)
                        watch_free(g, w);
                return 0;
        }
        if (g->freeing)
                return 0;

        if (what & CURL_POLL_IN)
                events |= EPOLLIN;
        if (what & CURL_POLL_OUT)
                events |= EPOLLOUT;

        if (w)
                return sd_event_source_set_io_events(w->source, events) < 0 ? -1 : 0;

        w = calloc(1, sizeof(*w));
        if (!w)
                return -1;
        if (sd_event_add_io(g->event, &w->source, fd, events, glue_on_io, g) < 0) {
                free(w);
                return -1;
        }
        (void) sd_event_source_set_description(w->source, "curl-io");
        w->next = g->watches;
        if (g->watches)
                g->watches->prev = w;
        g->watches = w;

        if (curl_multi_assign(g->multi, fd, w) != CURLM_OK) {
                watch_free(g, w);
                return -1;
        }
        return 0;
}

/* CURLMOPT_TIMERFUNCTION: -1 disarms, 0 means "as soon as possible" (never call curl from here). */
static int glue_timer_cb(CURLM *multi _unused_, long timeout_ms, void *userp) {
        CurlGlue *g = userp;

        if (g->freeing)
                return 0;
        if (timeout_ms < 0)
                return sd_event_source_set_enabled(g->timer, SD_EVENT_OFF) < 0 ? -1 : 0;
        if (sd_event_source_set_time_relative(g->timer, (uint64_t) timeout_ms * 1000) < 0 ||
            sd_event_source_set_enabled(g->timer, SD_EVENT_ONESHOT) < 0)
                return -1;
        return 0;
}

int curl_glue_new(sd_event *e, CurlGlue **ret) {
        CurlGlue *g;
        int r;

        if (!e || !ret)
                return -EINVAL;
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
                return -EIO;

        g = calloc(1, sizeof(*g));
        if (!g) {
                curl_global_cleanup();
                return -ENOMEM;
        }
        g->event = sd_event_ref(e);

        g->multi = curl_multi_init();
        if (!g->multi) {
                r = -ENOMEM;
                goto fail;
        }
        if (curl_multi_setopt(g->multi, CURLMOPT_SOCKETFUNCTION, glue_socket_cb) != CURLM_OK ||
            curl_multi_setopt(g->multi, CURLMOPT_SOCKETDATA, g) != CURLM_OK ||
            curl_multi_setopt(g->multi, CURLMOPT_TIMERFUNCTION, glue_timer_cb) != CURLM_OK ||
            curl_multi_setopt(g->multi, CURLMOPT_TIMERDATA, g) != CURLM_OK) {
                r = -EIO;
                goto fail;
        }

        /* curl's timeouts are in milliseconds: 1 ms accuracy, not sd-event's default 250 ms. */
        r = sd_event_add_time_relative(e, &g->timer, CLOCK_BOOTTIME, 0, 1000, glue_on_timer, g);
        if (r < 0)
                goto fail;
        (void) sd_event_source_set_description(g->timer, "curl-timer");
        r = sd_event_source_set_enabled(g->timer, SD_EVENT_OFF);
        if (r < 0)
                goto fail;

        *ret = g;
        return 0;

fail:
        glue_destroy(g);
        return r;
}

CurlGlue *curl_glue_free(CurlGlue *g) {
        if (!g || g->freeing)
                return NULL;

        g->freeing = true;
        while (g->transfers) {
                Transfer *t = g->transfers;
                g->transfers = t->next;
                (void) curl_multi_remove_handle(g->multi, t->easy);
                free(t);
        }
        /* Called from a CurlDone: glue_action() finishes the job once the stack unwinds. */
        if (g->dispatching == 0)
                glue_destroy(g);
        return NULL;
}

int curl_glue_add(CurlGlue *g, CURL *easy, CurlDone done, void *userdata) {
        Transfer *t;
        CURLMcode mc;

        if (!g || !easy || !done)
                return -EINVAL;
        if (g->freeing)
                return -ESTALE;

        t = calloc(1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        *t = (Transfer) { .easy = easy, .done = done, .userdata = userdata };

        /* This arms the timer (curl asks for 0 ms); the transfer starts from the loop, never in here. */
        mc = curl_multi_add_handle(g->multi, easy);
        if (mc != CURLM_OK) {
                free(t);
                return curlm_to_errno(mc);
        }
        t->next = g->transfers;
        g->transfers = t;
        return 0;
}

void curl_glue_remove(CurlGlue *g, CURL *easy) {
        Transfer *t;

        if (!g || !easy)
                return;
        t = transfer_take(g, easy);
        if (!t)
                return;         /* finished (and so already removed) or never added */
        (void) curl_multi_remove_handle(g->multi, easy);
        free(t);
}
