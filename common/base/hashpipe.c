/* SPDX-License-Identifier: MIT */

#include <pthread.h>
#include <stdbool.h>

#include "hashpipe.h"

#define QUEUE (2 * HASH_PIPE_SLOTS)     /* at most two jobs per slot are ever queued */

typedef struct Job {
        unsigned slot;
        Sha256 *a, *b;
        const void *data;
        size_t len;
} Job;

struct HashPipe {
        pthread_t thread;
        pthread_mutex_t lock;
        pthread_cond_t work, done;
        Job queue[QUEUE];
        size_t head, count;             /* FIFO of jobs not finished (the first may be running) */
        unsigned refs[HASH_PIPE_SLOTS]; /* unfinished jobs per slot */
        unsigned next_slot;
        bool stop;
};

static void *worker(void *arg) {
        HashPipe *p = arg;

        pthread_mutex_lock(&p->lock);
        for (;;) {
                while (p->count == 0 && !p->stop)
                        pthread_cond_wait(&p->work, &p->lock);
                if (p->count == 0)
                        break;
                Job j = p->queue[p->head];
                pthread_mutex_unlock(&p->lock);

                if (j.b)
                        sha256_update2(j.a, j.b, j.data, j.len);
                else
                        sha256_update(j.a, j.data, j.len);

                pthread_mutex_lock(&p->lock);
                p->head = (p->head + 1) % QUEUE;
                p->count--;
                p->refs[j.slot]--;
                pthread_cond_broadcast(&p->done);
        }
        pthread_mutex_unlock(&p->lock);
        return NULL;
}

int hash_pipe_new(HashPipe **ret) {
        HashPipe *p = calloc(1, sizeof(*p));
        int r;

        if (!p)
                return -ENOMEM;
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->work, NULL);
        pthread_cond_init(&p->done, NULL);
        r = pthread_create(&p->thread, NULL, worker, p);
        if (r != 0) {
                pthread_mutex_destroy(&p->lock);
                pthread_cond_destroy(&p->work);
                pthread_cond_destroy(&p->done);
                free(p);
                return -r;
        }
        *ret = p;
        return 0;
}

HashPipe *hash_pipe_free(HashPipe *p) {
        if (!p)
                return NULL;
        pthread_mutex_lock(&p->lock);
        p->stop = true;
        pthread_cond_signal(&p->work);
        pthread_mutex_unlock(&p->lock);
        pthread_join(p->thread, NULL);
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->work);
        pthread_cond_destroy(&p->done);
        free(p);
        return NULL;
}

unsigned hash_pipe_slot(HashPipe *p) {
        pthread_mutex_lock(&p->lock);
        unsigned s = p->next_slot;
        while (p->refs[s] > 0)
                pthread_cond_wait(&p->done, &p->lock);
        p->next_slot = (s + 1) % HASH_PIPE_SLOTS;
        pthread_mutex_unlock(&p->lock);
        return s;
}

void hash_pipe_feed(HashPipe *p, unsigned slot, Sha256 *a, Sha256 *b, const void *data, size_t len) {
        pthread_mutex_lock(&p->lock);
        while (p->count == QUEUE)
                pthread_cond_wait(&p->done, &p->lock);
        p->queue[(p->head + p->count) % QUEUE] = (Job) { slot, a, b, data, len };
        p->count++;
        p->refs[slot]++;
        pthread_cond_signal(&p->work);
        pthread_mutex_unlock(&p->lock);
}

void hash_pipe_sync(HashPipe *p) {
        pthread_mutex_lock(&p->lock);
        while (p->count > 0)
                pthread_cond_wait(&p->done, &p->lock);
        pthread_mutex_unlock(&p->lock);
}
