/*
 * pool.c - worker threads and a task queue (see pool.h).
 */
#include "pool.h"

#include <errno.h>
#include <stdlib.h>

struct task {
    larder__task_fn fn;
    void *arg;
};

struct larder__pool {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct task *queue; /* ring */
    size_t head, count, capacity;
    pthread_t *threads;
    int wanted, started;
    bool stopping;
};

int larder__pool_new(struct larder__pool **out, int threads)
{
    struct larder__pool *p = calloc(1, sizeof *p);
    if (!p || !(p->threads = calloc((size_t)threads, sizeof *p->threads))) {
        free(p);
        return -ENOMEM;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->wanted = threads;
    *out = p;
    return 0;
}

static void *worker(void *arg)
{
    struct larder__pool *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (p->count == 0 && !p->stopping)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->count == 0) break;
        struct task t = p->queue[p->head];
        p->head = (p->head + 1) % p->capacity;
        p->count--;
        pthread_mutex_unlock(&p->lock);
        t.fn(t.arg);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

void larder__pool_free(struct larder__pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    p->stopping = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    free(p->queue);
    free(p->threads);
    free(p);
}

int larder__pool_submit(struct larder__pool *p, larder__task_fn fn, void *arg)
{
    pthread_mutex_lock(&p->lock);
    if (p->count == p->capacity) {
        size_t capacity = p->capacity ? p->capacity * 2 : 64;
        struct task *queue = malloc(capacity * sizeof *queue);
        if (!queue) {
            pthread_mutex_unlock(&p->lock);
            fn(arg);
            return 0;
        }
        for (size_t i = 0; i < p->count; i++)
            queue[i] = p->queue[(p->head + i) % p->capacity];
        free(p->queue);
        p->queue = queue;
        p->head = 0;
        p->capacity = capacity;
    }
    p->queue[(p->head + p->count++) % p->capacity] = (struct task){fn, arg};
    /* start another worker while there is more queued work than idle ones */
    if (p->started < p->wanted && pthread_create(&p->threads[p->started], NULL, worker, p) == 0)
        p->started++;
    bool none = p->started == 0;
    if (none) { /* no thread at all: run it here */
        p->count--;
        pthread_mutex_unlock(&p->lock);
        fn(arg);
        return 0;
    }
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

void larder__latch_init(struct larder__latch *latch, size_t count)
{
    pthread_mutex_init(&latch->lock, NULL);
    pthread_cond_init(&latch->done, NULL);
    latch->left = count;
}

void larder__latch_arrive(struct larder__latch *latch)
{
    pthread_mutex_lock(&latch->lock);
    if (--latch->left == 0) pthread_cond_broadcast(&latch->done);
    pthread_mutex_unlock(&latch->lock);
}

void larder__latch_wait(struct larder__latch *latch)
{
    pthread_mutex_lock(&latch->lock);
    while (latch->left)
        pthread_cond_wait(&latch->done, &latch->lock);
    pthread_mutex_unlock(&latch->lock);
    pthread_mutex_destroy(&latch->lock);
    pthread_cond_destroy(&latch->done);
}
