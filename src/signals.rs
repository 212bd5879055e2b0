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

/// Until `setup_done` is set, a stop signal (raised into `interrupt`) ends the process at once:
/// one line on stderr naming what was stopped, and exit 3 (the README's code for a run stopped
/// by Ctrl-C or SIGTERM). Set-up can block in a connect, a listing or a footer read, which poll
/// no flag; once `setup_done` is set, the command's own loop polls `interrupt` instead.
pub fn exit_if_stopped_in_setup(
    interrupt: Arc<AtomicBool>,
    setup_done: Arc<AtomicBool>,
    command: &'static str,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("ringload-setup-stop".into())
        .spawn(move || {
            while !setup_done.load(Ordering::SeqCst) {
                if interrupt.load(Ordering::SeqCst) {
                    use std::io::Write;
                    let line = format!(
                        "ringload: {command} interrupted (Ctrl-C or SIGTERM) during set-up, \
                         before anything was measured\n"
                    );
                    let _ = std::io::stderr().write_all(line.as_bytes());
                    // exit::FAILED, a module of this layer, so written out.
                    std::process::exit(3);
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        })?;
    Ok(())
}
