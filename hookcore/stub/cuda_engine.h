/* cuda_engine.h - the stub libcuda's shared engine: several processes contending for one simulated
 * device (HOOKCORE_STUB_ENGINE_FILE), for the compute limiter's contention tests.
 *
 * Without it each process of a test has an engine of its own, so two claims never meet. With
 * HOOKCORE_STUB_ENGINE_FILE=<file> (created empty by the test) every process naming the file shares
 * one engine per physical device, mapped from it. The engine is processor sharing across streams:
 * while k streams (of any process) have work queued, each progresses at 1/k of the device's speed,
 * the fluid limit of a GPU time-slicing contexts. So a batch's [start, end] window holds the other
 * tenants' work that ran meanwhile, as on a real GPU, and the limiter's estimate of its own work is
 * what is put to the test. Completion times are worked out lazily up to "now" on every call (the
 * virtual clock of hookcore/stub/fake_clock.c makes them exact); a host waiting for work sleeps until
 * the projected completion and looks again (other processes may have queued work meanwhile).
 *
 * An event waits for the last op queued on its stream before it was recorded: its time is that op's
 * completion, or the record time when the stream was idle. Statistics per process (for the tests):
 * stubEngineBusyNs(dev, pid) = device time its ops used (pid 0: any process), and
 * stubEngineIdleNs(dev) = time no stream had work since the engine file was created.
 */
#ifndef HOOKCORE_STUB_CUDA_ENGINE_H
#define HOOKCORE_STUB_CUDA_ENGINE_H

#include <stdint.h>

/* 1 when the shared engine is in use (the variable is set and the file maps). */
int se_on(void);
/* Queue `dur_ns` of work on stream `key` of device `dev` (physical index); returns its op number. */
uint64_t se_submit(int dev, uint64_t key, int64_t dur_ns);
/* The last op queued on stream `key` (0: none yet). */
uint64_t se_last(int dev, uint64_t key);
/* Op `op` of stream `key` done? Sets *t_ns to its completion time when it is (op 0: done at once). */
int se_done(int dev, uint64_t key, uint64_t op, int64_t *t_ns);
/* Wait (sleeping on the monotonic clock) until op `op` of stream `key` is done. */
void se_wait(int dev, uint64_t key, uint64_t op);
/* Wait until every stream of this process on `dev` is idle. */
void se_wait_all(int dev);

#endif
