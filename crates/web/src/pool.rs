//! The threads that call warden-app for the async handlers. An [`App`] owns a store
//! connection that is not `Send` (SQLite's and PostgreSQL's clients are used from one
//! thread), so each worker opens its own and runs jobs sent to it; a handler awaits the
//! answer without blocking the runtime. The queue is bounded: a full one is a 503.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};

use warden_app::App;
use warden_core::event::Actor;
use warden_core::failure::Failure;
use warden_store::Workspace;

type Job = Box<dyn FnOnce(&App) + Send>;

/// Jobs waiting for a worker before new ones are turned away.
const QUEUE: usize = 64;

/// Worker threads, each with its own open workspace.
#[derive(Debug, Clone)]
pub struct Pool {
    tx: SyncSender<Job>,
}

impl Pool {
    /// Starts `workers` threads, each opening the workspace as a person; fails (with
    /// the store's own message) when the first cannot open it.
    pub fn start(ws: &Workspace, workers: usize) -> Result<Pool, Failure> {
        let (tx, rx) = sync_channel::<Job>(QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        for n in 0..workers.max(1) {
            let rx = Arc::clone(&rx);
            let ws = ws.clone();
            let (ready_tx, ready) = std::sync::mpsc::channel();
            std::thread::Builder::new()
                .name(format!("warden-web-{n}"))
                .spawn(move || match App::open(ws, Actor::Person) {
                    Ok(app) => {
                        let _ = ready_tx.send(Ok(()));
                        work(app, &rx)
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                })
                .map_err(|e| Failure::internal(format!("cannot start a worker thread: {e}")))?;
            ready
                .recv()
                .map_err(|_| Failure::internal("a worker thread died while opening the store"))??;
        }
        Ok(Pool { tx })
    }

    /// Runs `f` on a worker and returns its answer.
    pub async fn run<T, F>(&self, f: F) -> Result<T, Failure>
    where
        T: Send + 'static,
        F: FnOnce(&App) -> Result<T, Failure> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |app| {
            let _ = tx.send(f(app));
        });
        match self.tx.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return Err(Failure::conflict(
                    "the console is busy with other requests; try again in a moment",
                ));
            }
            Err(TrySendError::Disconnected(_)) => {
                return Err(Failure::internal(
                    "the console's workers stopped; restart it",
                ));
            }
        }
        rx.await.map_err(|_| {
            Failure::internal(
                "the request failed inside Warden (a worker panicked); see the server's log",
            )
        })?
    }
}

fn work(app: App, rx: &Mutex<Receiver<Job>>) {
    loop {
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        // A panic in one request must not take the worker with it.
        if std::panic::catch_unwind(AssertUnwindSafe(|| job(&app))).is_err() {
            warden_store::say!("warden serve: a request panicked; the worker goes on");
        }
    }
}
