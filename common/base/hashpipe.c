/* SPDX-License-Identifier: MIT */

#include <pthread.h>
#include <stdbool.h>

#include "hashpipe.h"

#define QUEUE (4 * HASH_PIPE_SLOTS)     /* jobs: a window queues up to four (its span digests, and a chunk digest cut in
                                         * two; or base digests, decode, new digests and write) */

typedef enum JobState {
        JOB_QUEUED,
        JOB_RUNNING,
        JOB_DONE,                       /* finished, but an earlier job is not: still in the queue */
} JobState;

typedef struct Job {
        unsigned slot;
        Sha256 *a, *b;
        const void *data;
        size_t len;
        void (*fn)(void *arg);          /* hash_pipe_call(): run this instead of hashing */
        void *arg;
        JobState state;
} Job;

struct HashPipe {
        pthread_t thread;
        pthread_mutex_t lock;
        pthread_cond_t work, done;
        Job queue[QUEUE];
        size_t head, count;             /* the jobs from the oldest unfinished one on, in feeding order */
        unsigned refs[HASH_PIPE_SLOTS]; /* unfinished jobs per slot */
        unsigned next_slot;
        bool stop;
};

static bool share_a_state(const Job *x, const Job *y) {
        return x->a == y->a || x->a == y->b || (x->b && (x->b == y->a || x->b == y->b));
}

/*
 * The first queued job that no earlier unfinished job shares a state with (each state is fed
 * in order; jobs on different states may run at once), or NULL.
 */
static Job *runnable(HashPipe *p) {
        for (size_t i = 0; i < p->count; i++) {
                Job *j = &p->queue[(p->head + i) % QUEUE];
                bool ok = j->state == JOB_QUEUED;
                for (size_t e = 0; ok && e < i; e++) {
                        const Job *x = &p->queue[(p->head + e) % QUEUE];
                        ok = x->state == JOB_DONE || !share_a_state(x, j);
                }
                if (ok)
                        return j;
        }
        return NULL;
}

/* Run @j with the lock released; then retire the finished jobs at the head. Called with the lock held. */
static void run(HashPipe *p, Job *j) {
        j->state = JOB_RUNNING;
        pthread_mutex_unlock(&p->lock);
        if (j->fn)
                j->fn(j->arg);
        else if (j->b)
                sha256_update2(j->a, j->b, j->data, j->len);
        else
                sha256_update(j->a, j->data, j->len);
        pthread_mutex_lock(&p->lock);
        j->state = JOB_DONE;
        p->refs[j->slot]--;
        while (p->count > 0 && p->queue[p->head].state == JOB_DONE) {
                p->head = (p->head + 1) % QUEUE;
                p->count--;
        }
        pthread_cond_broadcast(&p->done);
        pthread_cond_signal(&p->work);  /* a job that waited on this one may run now */
}

/*
 * The caller would wait for the worker: it takes a job itself when one can run beside the
 * worker's (the span digests and the chunk digests of one window are independent), else
 * waits for one to finish. Called with the lock held.
 */
static void help_or_wait(HashPipe *p) {
        Job *j = runnable(p);

        if (j)
                run(p, j);
        else
                pthread_cond_wait(&p->done, &p->lock);
}

static void *worker(void *arg) {
        HashPipe *p = arg;

        pthread_mutex_lock(&p->lock);
        for (;;) {
                Job *j = runnable(p);
                if (j) {
                        run(p, j);
                        continue;
                }
                if (p->stop && p->count == 0)
                        break;
                pthread_cond_wait(&p->work, &p->lock);
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
                help_or_wait(p);
        p->next_slot = (s + 1) % HASH_PIPE_SLOTS;
        pthread_mutex_unlock(&p->lock);
        return s;
}

static void queue(HashPipe *p, Job j) {
        pthread_mutex_lock(&p->lock);
        while (p->count == QUEUE)
                help_or_wait(p);
        p->queue[(p->head + p->count) % QUEUE] = j;
        p->count++;
        p->refs[j.slot]++;
        pthread_cond_signal(&p->work);
        pthread_mutex_unlock(&p->lock);
}

void hash_pipe_feed(HashPipe *p, unsigned slot, Sha256 *a, Sha256 *b, const void *data, size_t len) {
        queue(p, (Job) { .slot = slot, .a = a, .b = b, .data = data, .len = len, .state = JOB_QUEUED });
}

void hash_pipe_call(HashPipe *p, unsigned slot, Sha256 *a, Sha256 *b, void (*fn)(void *arg), void *arg) {
        queue(p, (Job) { .slot = slot, .a = a, .b = b, .fn = fn, .arg = arg, .state = JOB_QUEUED });
}

void hash_pipe_sync(HashPipe *p) {
        pthread_mutex_lock(&p->lock);
        while (p->count > 0)
                help_or_wait(p);
        pthread_mutex_unlock(&p->lock);
}
