//! Forwarding each rank's stdout and stderr byte for byte, optionally with `[rank] ` in
//! front of every line. Lines (or pieces of at most [`PIECE`] bytes of a longer one) are
//! written whole under a lock so output of different ranks never interleaves mid-line;
//! nothing is added or changed (a last line without a newline stays so; bytes that are not
//! UTF-8 pass through).

use std::io::{BufRead, BufReader, Read, Write};
use std::thread::JoinHandle;

/// Most bytes of one line written at once: a rank that writes megabytes without a
/// newline (binary output) is forwarded in pieces, never held whole.
const PIECE: u64 = 64 << 10;

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
/// or empty) in front of every line, and handing every piece to `tap` too (the tools that
/// pulled the rank's output). The thread ends at EOF (when the rank and all its children
/// closed it). When our stream cannot be written (a closed pipe, a full disk, a closed
/// descriptor), `failed` is called once with the error and the rest is drained unwritten
/// (but still tapped), so the rank never blocks on a full pipe while the job ends.
pub fn forward(
    src: impl Read + Send + 'static,
    (stream, name, label): (Stream, String, String),
    tap: impl Fn(&[u8]) + Send + 'static,
    failed: impl FnOnce(std::io::Error) + Send + 'static,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("{name}-{stream:?}"))
        .spawn(move || {
            let mut reader = BufReader::new(src);
            let prefix = label.into_bytes();
            let mut line = Vec::with_capacity(256);
            let mut failed = Some(failed);
            let mut at_start = true;
            loop {
                line.clear();
                match (&mut reader).take(PIECE).read_until(b'\n', &mut line) {
                    Ok(0) => break,
                    Ok(_) => {
                        tap(&line);
                        let label = if at_start { &prefix[..] } else { &[] };
                        at_start = line.ends_with(b"\n");
                        if failed.is_none() {
                            continue;
                        }
                        let res = match stream {
                            Stream::Stdout => {
                                write_line(&mut std::io::stdout().lock(), label, &line)
                            }
                            Stream::Stderr => {
                                write_line(&mut std::io::stderr().lock(), label, &line)
                            }
                        };
                        if let Err(e) = res
                            && let Some(f) = failed.take()
                        {
                            // Said once; the rest is drained so the rank never blocks.
                            f(e);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What `forward` taps of `input` (the bytes it would write, without a label).
    fn tapped(input: &[u8]) -> Vec<u8> {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = std::sync::Arc::clone(&seen);
        let src = std::io::Cursor::new(input.to_vec());
        forward(
            src,
            (Stream::Stderr, "t".into(), String::new()),
            move |piece| into.lock().expect("tap").extend_from_slice(piece),
            |_| {},
        )
        .expect("thread")
        .join()
        .expect("joined");
        seen.lock().expect("tap").clone()
    }

    #[test]
    fn bytes_pass_through_exactly_whatever_their_lines() {
        for input in [
            b"no newline at the end".to_vec(),
            b"two\nlines\n".to_vec(),
            vec![0xff, 0xfe, b'\n', 0],
            (0..200_000u32).map(|i| (i % 251) as u8).collect(),
            Vec::new(),
        ] {
            assert_eq!(tapped(&input), input);
        }
    }
}
