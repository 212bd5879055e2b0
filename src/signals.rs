//! SIGINT (Ctrl-C) and SIGTERM: `serve` waits for one; `run` and `sweep` raise a flag their
//! loops poll, so an interrupted run or sweep still keeps what it measured.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// SIGINT (Ctrl-C) and SIGTERM, caught from the moment this is made.
pub struct StopSignals {
    runtime: tokio::runtime::Runtime,
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl std::fmt::Debug for StopSignals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StopSignals").finish_non_exhaustive()
    }
}

impl StopSignals {
    pub fn install() -> std::io::Result<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        let _guard = runtime.enter();
        let interrupt = signal(SignalKind::interrupt())?;
        let terminate = signal(SignalKind::terminate())?;
        drop(_guard);
        Ok(StopSignals {
            runtime,
            interrupt,
            terminate,
        })
    }

    /// Blocks until one of the signals arrives.
    pub fn wait(mut self) {
        self.runtime.block_on(async {
            tokio::select! {
                _ = self.interrupt.recv() => {}
                _ = self.terminate.recv() => {}
            }
        });
    }
}

/// Sets `flag` when SIGINT or SIGTERM arrives, from now on.
pub fn raise_on_stop_signals(flag: Arc<AtomicBool>) -> std::io::Result<()> {
    let signals = StopSignals::install()?;
    std::thread::Builder::new()
        .name("ringload-signals".into())
        .spawn(move || {
            signals.wait();
            flag.store(true, Ordering::SeqCst);
        })?;
    Ok(())
}
