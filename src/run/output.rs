//! Forwarding each rank's stdout and stderr, line by line, optionally prefixed with
//! `[rank] `. Lines are written whole under a lock so output of different ranks never
//! interleaves mid-line; bytes that are not UTF-8 pass through unchanged.

use std::io::{BufRead, BufReader, Read, Write};
use std::thread::JoinHandle;

/// Which of our streams a rank stream goes to.
#[derive(Clone, Copy, Debug)]
pub enum Stream {
    /// Our stdout.
    Stdout,
    /// Our stderr.
    Stderr,
}

impl Stream {
    /// The PMIx channel of the same name (for tools that pull a rank's output).
    pub fn channel(self) -> pmix::server::IofChannel {
        match self {
            Stream::Stdout => pmix::server::IofChannel::Stdout,
            Stream::Stderr => pmix::server::IofChannel::Stderr,
        }
    }
}

/// Starts a thread (named `name`) copying `src` to our `stream`, putting `label` (`[rank] `
/// or empty) in front of every line, and handing every line to `tap` too (the tools that
/// pulled the rank's output). The thread ends at EOF (when the rank and all its children
/// closed it). When our stream is gone (a closed pipe), `closed` is called once and the
/// rest is drained unwritten (but still tapped), so the rank never blocks on a full pipe
/// while the job ends.
pub fn forward(
    src: impl Read + Send + 'static,
    (stream, name, label): (Stream, String, String),
    tap: impl Fn(&[u8]) + Send + 'static,
    closed: impl FnOnce() + Send + 'static,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("{name}-{stream:?}"))
        .spawn(move || {
            let mut reader = BufReader::new(src);
            let prefix = label.into_bytes();
            let mut line = Vec::with_capacity(256);
            let mut closed = Some(closed);
            let mut gone = false;
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) => break,
                    Ok(_) => {
                        if !line.ends_with(b"\n") {
                            line.push(b'\n');
                        }
                        tap(&line);
                        if gone {
                            continue;
                        }
                        let res = match stream {
                            Stream::Stdout => {
                                write_line(&mut std::io::stdout().lock(), &prefix, &line)
                            }
                            Stream::Stderr => {
                                write_line(&mut std::io::stderr().lock(), &prefix, &line)
                            }
                        };
                        if let Err(e) = res
                            && e.kind() == std::io::ErrorKind::BrokenPipe
                        {
                            // Our own output is gone (closed pipe): say so once, and keep
                            // draining so the rank never blocks on a full pipe.
                            gone = true;
                            if let Some(f) = closed.take() {
                                f();
                            }
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
        })
}

fn write_line(out: &mut impl Write, prefix: &[u8], line: &[u8]) -> std::io::Result<()> {
    out.write_all(prefix)?;
    out.write_all(line)?;
    out.flush()
}
