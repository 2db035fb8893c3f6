//! apalis's backend over Receipt's queues: the tasks a worker's queue hands
//! out, as one stream (the attempts its claims of the job rows win, or the
//! messages it fetches from Redis). The queue counts the worker's slots: it
//! hands out a task only for a free slot, so nothing waits for one inside
//! apalis, and no `.concurrency()` layer counts them a second time.
//! apalis's `Monitor` and worker run it like any backend; nothing is
//! acknowledged through apalis, the queue doing that itself (an attempt's
//! outcome on the job rows, the next fetch on Redis).

use std::task::{Context, Poll};

use apalis::prelude::{Backend, Identity, RandomId, Task, WorkerContext};
use apalis_core::backend::{BackendConfig, finalize::Ephemeral};
use futures::{StreamExt, stream::BoxStream};

/// A worker's queue as an apalis backend (see the module's doc).
pub struct QueueBackend<T> {
    tasks: BoxStream<'static, T>,
}

impl<T> QueueBackend<T> {
    /// The backend over `tasks`, which ends only when the queue stops.
    pub fn new(tasks: BoxStream<'static, T>) -> Self {
        Self { tasks }
    }
}

impl<T: Send + 'static> Backend for QueueBackend<T> {
    type Task = Task<T>;
    type Error = std::convert::Infallible;

    fn poll_ready(
        &mut self,
        _: &mut Context<'_>,
        _: &WorkerContext,
    ) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
        _: &WorkerContext,
    ) -> Poll<Option<Result<Self::Task, Self::Error>>> {
        self.tasks
            .poll_next_unpin(cx)
            .map(|task| task.map(|task| Ok(Task::new(task))))
    }

    fn poll_close(
        &mut self,
        _: &mut Context<'_>,
        _: &WorkerContext,
    ) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }
}

impl<T: Send + 'static> BackendConfig for QueueBackend<T> {
    type Args = T;
    type Id = RandomId;
    type Kind = Ephemeral;
    type Config = ();
    type Layer = Identity;

    fn config(&self) -> &Self::Config {
        &()
    }

    fn middleware(&mut self, _: &mut WorkerContext) -> Self::Layer {
        Identity::new()
    }
}
