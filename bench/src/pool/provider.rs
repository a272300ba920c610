//! The provider process of `maestro bench pool` as the benchmark drives it: started with
//! the benchmark's settings, told what to do by lines on its input, heard by lines on its
//! output (each wait bounded).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::time::Duration;

use fabric::ProgressMode;
use pool::bootstrap::PmInfo;

use super::{PoolBench, PoolBenchError};

/// The provider process (`maestro-bench pool-provider`): it offers one CDO per size and serves
/// until its stdin closes; on drop its stdin is closed, it is given
/// [`ProviderProcess::GRACE`] to withdraw and leave (a GFS provider removes its files), and
/// killed after.
pub(super) struct ProviderProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: std::sync::mpsc::Receiver<std::io::Result<String>>,
}

impl ProviderProcess {
    /// How long a provider told to stop may take to withdraw and leave.
    const GRACE: Duration = Duration::from_secs(10);

    /// Starts the provider of `bench` for the PM of `pm`, offering through the global file
    /// system in `gfs` if given; returns once it offered its CDOs.
    ///
    /// # Errors
    /// The process could not start, or did not say it offered within two minutes.
    pub(super) fn spawn(
        pm: &PmInfo,
        bench: &PoolBench,
        gfs: Option<&std::path::Path>,
    ) -> Result<ProviderProcess, PoolBenchError> {
        let sizes: Vec<String> = bench.sizes.iter().map(ToString::to_string).collect();
        let mut child = bench
            .remote
            .command()?
            .args(["pool-provider", "--pm", &pm.encode(), "--provider"])
            .arg(&bench.provider)
            .args(["--sizes", &sizes.join(",")])
            .args(["--progress", progress_name(bench.progress)])
            .args(["--inline-max", &bench.inline_max.to_string()])
            .args(["--group", &bench.group.to_string()])
            .args(bench.remote.args())
            .args(gfs.map(|d| format!("--gfs-dir={}", d.display())))
            .args(bench.user_memory.then_some("--user-memory"))
            .args(bench.no_rings.then_some("--no-rings"))
            .arg("--buffers")
            .args(
                clap::ValueEnum::to_possible_value(&bench.buffers).map(|v| v.get_name().to_owned()),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stdout = stdout.ok_or_else(|| PoolBenchError::Provider("no stdout pipe".into()))?;
        // Its lines, read on a thread of their own so that every wait has a limit; the
        // thread ends with the process's output.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut provider = ProviderProcess {
            child,
            stdin: Some(stdin.ok_or_else(|| PoolBenchError::Provider("no stdin pipe".into()))?),
            stdout: rx,
        };
        match provider.stdout.recv_timeout(Duration::from_secs(120)) {
            Ok(Ok(line)) if line.trim() == "ready" => Ok(provider),
            other => {
                let _ = provider.child.kill();
                Err(PoolBenchError::Provider(format!(
                    "it did not offer its CDOs ({})",
                    said(other)
                )))
            }
        }
    }
}

/// What the provider said instead of what was awaited, in words.
fn said(got: Result<std::io::Result<String>, std::sync::mpsc::RecvTimeoutError>) -> String {
    match got {
        Ok(Ok(line)) => format!("it said {:?}", line.trim()),
        Ok(Err(e)) => format!("its output failed: {e}"),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => "it said nothing in time".into(),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            "it ended without saying it (see its error output above)".into()
        }
    }
}

impl ProviderProcess {
    /// Waits at most `limit` for the provider to say `word` (a line).
    pub(super) fn expect(&mut self, word: &str, limit: Duration) -> Result<(), PoolBenchError> {
        self.answer(word, limit).map(drop)
    }

    /// Waits at most `limit` for the provider's line that starts with the word `word`;
    /// what follows it.
    pub(super) fn answer(&mut self, word: &str, limit: Duration) -> Result<String, PoolBenchError> {
        match self.stdout.recv_timeout(limit) {
            Ok(Ok(line)) if line.split_whitespace().next() == Some(word) => {
                Ok(line.trim()[word.len()..].trim().to_owned())
            }
            other => Err(PoolBenchError::Provider(format!(
                "it did not say {word:?} within {limit:?} ({})",
                said(other)
            ))),
        }
    }

    /// Sends the provider `command` (a line).
    pub(super) fn tell(&mut self, command: &str) -> Result<(), PoolBenchError> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| PoolBenchError::Provider("its input is closed".into()))?;
        writeln!(stdin, "{command}")?;
        stdin.flush()?;
        Ok(())
    }
}

impl Drop for ProviderProcess {
    fn drop(&mut self) {
        crate::peer::end_child(&mut self.child, self.stdin.take(), Self::GRACE);
    }
}

fn progress_name(p: ProgressMode) -> &'static str {
    match p {
        ProgressMode::Block => "block",
        ProgressMode::Spin => "spin",
    }
}
