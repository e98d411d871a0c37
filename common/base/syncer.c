/* SPDX-License-Identifier: MIT */

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "syncer.h"

struct Syncer {
        const FileSet *set;
        pthread_t thread;
        pthread_mutex_t lock;
        pthread_cond_t work, done;      /* done waits on CLOCK_MONOTONIC (syncer_finish()'s deadline) */
        uint64_t synced;                /* the bytes before this are fdatasync'ed */
        uint64_t wanted;                /* ... and those before this asked for */
        int error;                      /* the first failed fdatasync's -errno; no round after it */
        bool stop;
};

/* fdatasync the files holding [from, to) of the space. */
static int sync_range(const FileSet *set, uint64_t from, uint64_t to) {
        uint64_t end = to < set->size ? to : set->size;

        for (size_t i = from < set->size ? fileset_locate(set, from) : set->n_files;
             i < set->n_files && set->files[i].offset < end; i++)
                if (fdatasync(set->files[i].fd) < 0)
                        return negative_errno();
        return 0;
}

static void *worker(void *arg) {
        Syncer *s = arg;

        pthread_mutex_lock(&s->lock);
        while (!s->stop) {
                if (s->error < 0 || s->synced == s->wanted) {
                        pthread_cond_wait(&s->work, &s->lock);
                        continue;
                }
                uint64_t from = s->synced, to = s->wanted;
                pthread_mutex_unlock(&s->lock);
                int r = sync_range(s->set, from, to);
                pthread_mutex_lock(&s->lock);
                if (r < 0)
                        s->error = r;
                else
                        s->synced = to;
                pthread_cond_broadcast(&s->done);
        }
        pthread_mutex_unlock(&s->lock);
        return NULL;
}

int syncer_new(const FileSet *set, Syncer **ret) {
        Syncer *s = calloc(1, sizeof(*s));
        pthread_condattr_t attr;
        int r;

        if (!s)
                return -ENOMEM;
        s->set = set;
        pthread_mutex_init(&s->lock, NULL);
        pthread_cond_init(&s->work, NULL);
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&s->done, &attr);
        pthread_condattr_destroy(&attr);
        r = pthread_create(&s->thread, NULL, worker, s);
        if (r != 0) {
                pthread_mutex_destroy(&s->lock);
                pthread_cond_destroy(&s->work);
                pthread_cond_destroy(&s->done);
                free(s);
                return -r;
        }
        *ret = s;
        return 0;
}

Syncer *syncer_free(Syncer *s) {
        if (!s)
                return NULL;
        pthread_mutex_lock(&s->lock);
        s->stop = true;
        pthread_cond_signal(&s->work);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->thread, NULL);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->work);
        pthread_cond_destroy(&s->done);
        free(s);
        return NULL;
}

static int ask(Syncer *s, uint64_t pos, uint64_t piece) {
        pthread_mutex_lock(&s->lock);
        int r = s->error;
        if (r == 0 && pos > s->wanted && pos - s->wanted >= piece) {
                s->wanted = pos;
                pthread_cond_signal(&s->work);
        }
        pthread_mutex_unlock(&s->lock);
        return r;
}

int syncer_behind(Syncer *s, uint64_t pos) {
        return ask(s, pos, SYNCER_PIECE);
}

int syncer_ask(Syncer *s, uint64_t pos) {
        return ask(s, pos, 1);
}

int syncer_end(Syncer **s, uint64_t deadline_ns) {
        int r = *s ? syncer_finish(*s, deadline_ns) : 0;

        if (r == 0)
                *s = syncer_free(*s);
        return r;
}

int syncer_finish(Syncer *s, uint64_t deadline_ns) {
        struct timespec until = { .tv_sec = (time_t) (deadline_ns / 1000000000u),
                                  .tv_nsec = (long) (deadline_ns % 1000000000u) };
        bool late = false;

        pthread_mutex_lock(&s->lock);
        while (s->error == 0 && s->synced < s->wanted && !late) {
                if (deadline_ns == 0)
                        pthread_cond_wait(&s->done, &s->lock);
                else
                        late = pthread_cond_timedwait(&s->done, &s->lock, &until) != 0;
        }
        int r = s->error < 0 ? s->error : s->synced < s->wanted;
        pthread_mutex_unlock(&s->lock);
        return r;
}
