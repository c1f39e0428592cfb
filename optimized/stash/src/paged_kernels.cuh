// The device side of the paged stash: the pool's device-resident layout and the fused stash,
// restore and reset bodies. Each body runs over a fixed index space (a number of workers chosen
// when the pool is built), so the launch shape never depends on the row count, which is read on
// the device. Every worker sees the same freelist heads (nobody moves them during a launch),
// decides the same outcome, and copies its share (writing the key's page-table row as it goes);
// the last worker to have read the state commits, once its own copies are issued: it moves the
// freelist counters and marks the key's entry, or records the failure in the sticky status word
// and touches nothing else. The commit changes only what the workers read before they copy (the
// entries, the freelist positions, the status word), never what a copy reads or writes, so it
// needs no wait for the other workers' copies; the next launch sees both (stream order). The cuda
// back end runs these as kernels, the host back end runs the same bodies on its threads.
//
// The layers, each including the one before: kernels/pool_layout.cuh (the pool, the freelist
// rings, the status word), kernels/work_split.cuh (how a launch splits the copies),
// kernels/key_bodies.cuh (one key's stash and restore), kernels/batch_plan.cuh (what a batch's
// bodies share: its plan, the spread of its work items, its commit), then the batched bodies
// kernels/stash_batch_body.cuh and kernels/restore_batch_body.cuh; kernels/reset_body.cuh (a
// pool's reset) needs only the layout.
#pragma once

#include "kernels/reset_body.cuh"
#include "kernels/restore_batch_body.cuh"
#include "kernels/stash_batch_body.cuh"
