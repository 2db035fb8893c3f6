//! Group commit: callers that each have one small write hand it to a
//! batcher, which runs one transaction for all the writes waiting at that
//! moment. Under load a transaction carries many writes (one commit, a few
//! round trips); when idle it carries one, at once, so nothing waits for a
//! batch to fill.

use std::sync::Arc;

use futures::FutureExt;
use tokio::sync::{mpsc, oneshot};

use crate::{Error, Result};

type Request<I, O> = (I, oneshot::Sender<Result<O>>);

pub struct Batcher<I, O> {
    sender: mpsc::UnboundedSender<Request<I, O>>,
}

impl<I, O> Clone for Batcher<I, O> {
    fn clone(&self) -> Self {
        Self {
            sender: self.sender.clone(),
        }
    }
}

impl<I: Send + 'static, O: Send + 'static> Batcher<I, O> {
    /// Spawns the task that runs `write` on up to `max_batch` waiting
    /// items at a time. `write` answers in the order of its input. The
    /// task ends when the last handle is dropped.
    pub fn spawn<W, F>(max_batch: usize, write: W) -> Self
    where
        W: Fn(Vec<I>) -> F + Send + 'static,
        F: Future<Output = Result<Vec<O>>> + Send,
    {
        let (sender, mut receiver) = mpsc::unbounded_channel::<Request<I, O>>();
        tokio::spawn(async move {
            let mut waiting = Vec::with_capacity(max_batch);
            while receiver.recv_many(&mut waiting, max_batch).await > 0 {
                let (items, replies): (Vec<I>, Vec<_>) = waiting.drain(..).unzip();
                // A panic fails this batch's callers, not every later one.
                let written = std::panic::AssertUnwindSafe(write(items))
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|_| Err(Error::Corrupt("a group commit panicked".into())));
                match written {
                    Ok(outputs) if outputs.len() == replies.len() => {
                        for (reply, output) in replies.into_iter().zip(outputs) {
                            let _ = reply.send(Ok(output));
                        }
                    }
                    Ok(outputs) => {
                        let error = Arc::new(Error::Corrupt(format!(
                            "a batch of {} writes answered {}",
                            replies.len(),
                            outputs.len()
                        )));
                        for reply in replies {
                            let _ = reply.send(Err(Error::Batch(error.clone())));
                        }
                    }
                    Err(error) => {
                        let error = Arc::new(error);
                        for reply in replies {
                            let _ = reply.send(Err(Error::Batch(error.clone())));
                        }
                    }
                }
            }
        });
        Self { sender }
    }

    /// Hands `item` to the next batch and waits for its answer.
    pub async fn call(&self, item: I) -> Result<O> {
        let (reply, answer) = oneshot::channel();
        self.sender
            .send((item, reply))
            .map_err(|_| Error::Config("the batcher has stopped".into()))?;
        answer
            .await
            .map_err(|_| Error::Config("the batcher stopped before answering".into()))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn concurrent_calls_share_batches_and_get_their_own_answers() {
        let sizes = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = sizes.clone();
        let doubler = Batcher::spawn(8, move |items: Vec<u32>| {
            seen.lock().unwrap().push(items.len());
            async move {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                Ok(items.into_iter().map(|n| n * 2).collect())
            }
        });
        let answers = futures::future::join_all((0..40u32).map(|n| {
            let doubler = doubler.clone();
            async move { doubler.call(n).await.unwrap() }
        }))
        .await;
        assert_eq!(answers, (0..40u32).map(|n| n * 2).collect::<Vec<_>>());
        let sizes = sizes.lock().unwrap();
        assert_eq!(sizes.iter().sum::<usize>(), 40);
        assert!(sizes.iter().all(|&n| n <= 8), "{sizes:?}");
        assert!(sizes.len() < 40, "some calls shared a batch: {sizes:?}");
    }

    #[tokio::test]
    async fn a_panicking_batch_fails_its_calls_and_the_next_batch_runs() {
        let fragile = Batcher::spawn(4, |items: Vec<u32>| async move {
            assert!(items != [13], "unlucky");
            Ok(items)
        });
        assert!(fragile.call(13).await.is_err());
        assert_eq!(fragile.call(7).await.unwrap(), 7);
    }

    #[tokio::test]
    async fn a_failed_batch_fails_each_of_its_calls() {
        let failing = Batcher::spawn(4, |_: Vec<u32>| async {
            Err::<Vec<u32>, _>(Error::Corrupt("no".into()))
        });
        let error = failing.call(1).await.unwrap_err();
        assert!(error.to_string().contains("no"), "{error}");
    }
}
