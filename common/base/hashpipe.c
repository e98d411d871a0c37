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
        uint64_t pairs;                 /* feeds run two at a time (partner()) */
};

static bool share_a_state(const Job *x, const Job *y) {
        return x->a == y->a || x->a == y->b || (x->b && (x->b == y->a || x->b == y->b));
}

/* Whether the @i-th job may run now: queued, and no earlier unfinished job shares a state with it. */
static bool can_run(const HashPipe *p, size_t i) {
        const Job *j = &p->queue[(p->head + i) % QUEUE];
        bool ok = j->state == JOB_QUEUED;

        for (size_t e = 0; ok && e < i; e++) {
                const Job *x = &p->queue[(p->head + e) % QUEUE];
                ok = x->state == JOB_DONE || !share_a_state(x, j);
        }
        return ok;
}

/*
 * The first job that may run (each state is fed in order; jobs on different states may run at
 * once), or NULL; its index in *@ret_i.
 */
static Job *runnable(HashPipe *p, size_t *ret_i) {
        for (size_t i = 0; i < p->count; i++)
                if (can_run(p, i)) {
                        *ret_i = i;
                        return &p->queue[(p->head + i) % QUEUE];
                }
        return NULL;
}

static bool single_feed(const Job *j) {
        return !j->fn && !j->b;
}

/*
 * For the @i-th job, a single-state feed: a later one that may run beside it, on another state,
 * or NULL. The two go through the two-state kernel together, which hashes about 1.5 times as
 * fast as one state at a time: a chunk digest beside the next chunk's, when the caller has run
 * ahead of the worker.
 */
static Job *partner(HashPipe *p, size_t i) {
        const Job *j = &p->queue[(p->head + i) % QUEUE];

        for (size_t k = i + 1; k < p->count; k++) {
                Job *x = &p->queue[(p->head + k) % QUEUE];
                if (single_feed(x) && x->a != j->a && x->len > 0 && can_run(p, k))
                        return x;
        }
        return NULL;
}

static void retire(HashPipe *p, Job *j) {
        j->state = JOB_DONE;
        p->refs[j->slot]--;
}

/*
 * Run the @i-th job @j (with a partner, when it is a single-state feed and one may run beside it)
 * with the lock released; then retire the finished jobs at the head. Called with the lock held.
 */
static void run(HashPipe *p, Job *j, size_t i) {
        Job *k = single_feed(j) && j->len > 0 ? partner(p, i) : NULL;

        j->state = JOB_RUNNING;
        if (k) {
                k->state = JOB_RUNNING;
                p->pairs++;
        }
        pthread_mutex_unlock(&p->lock);
        if (j->fn)
                j->fn(j->arg);
        else if (j->b)
                sha256_update2(j->a, j->b, j->data, j->len);
        else if (k) {
                size_t n = j->len < k->len ? j->len : k->len;
                sha256_update_pair(j->a, j->data, k->a, k->data, n);
                sha256_update(j->a, (const uint8_t *) j->data + n, j->len - n);
                sha256_update(k->a, (const uint8_t *) k->data + n, k->len - n);
        } else
                sha256_update(j->a, j->data, j->len);
        pthread_mutex_lock(&p->lock);
        retire(p, j);
        if (k)
                retire(p, k);
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
        size_t i;
        Job *j = runnable(p, &i);

        if (j)
                run(p, j, i);
        else
                pthread_cond_wait(&p->done, &p->lock);
}

static void *worker(void *arg) {
        HashPipe *p = arg;

        pthread_mutex_lock(&p->lock);
        for (;;) {
                size_t i;
                Job *j = runnable(p, &i);
                if (j) {
                        run(p, j, i);
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

uint64_t hash_pipe_pairs(HashPipe *p) {
        pthread_mutex_lock(&p->lock);
        uint64_t n = p->pairs;
        pthread_mutex_unlock(&p->lock);
        return n;
}
