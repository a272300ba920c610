//! Programs on a pseudo-terminal of a given size, as a person at a terminal runs them: what
//! they draw is read back to check that it fits.

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A program whose standard input, output and error are one pseudo-terminal; its process
/// group is killed when this is dropped.
pub struct Pty {
    child: std::process::Child,
    /// Whether its leader was waited for (its group is then killed already).
    reaped: bool,
    /// Everything it wrote so far.
    screen: Arc<Mutex<Vec<u8>>>,
}

impl Pty {
    /// Starts `cmd` on a new pseudo-terminal of `rows` x `cols`, in a new process group.
    pub fn spawn(cmd: &mut Command, rows: u16, cols: u16) -> Pty {
        let (mut master, mut slave) = (-1, -1);
        let size = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: openpty writes the two descriptors; the name and termios may be null.
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                &size,
            )
        };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both descriptors are fresh and owned here alone.
        let (master, slave) =
            unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        let io = |fd: &OwnedFd| Stdio::from(fd.try_clone().expect("dup"));
        let child = cmd
            .process_group(0)
            .stdin(io(&slave))
            .stdout(io(&slave))
            .stderr(io(&slave))
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
        drop(slave);
        let screen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&screen);
        let mut master = std::fs::File::from(master);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once the last holder of the terminal's other side is gone.
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().expect("lock").extend_from_slice(&buf[..n]);
            }
        });
        Pty {
            child,
            reaped: false,
            screen,
        }
    }

    /// What it wrote so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().expect("lock")).into_owned()
    }

    /// Waits within `limit` until what it wrote satisfies `done`; panics with it otherwise.
    pub fn wait_for(&self, limit: Duration, done: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let text = self.text();
            if done(&text) {
                return text;
            }
            assert!(
                start.elapsed() < limit,
                "not seen within {limit:?}:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits within `limit` for it to end: its status.
    pub fn wait(mut self, limit: Duration) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                // What it left in its group goes too.
                // SAFETY: signalling the process group this helper started.
                unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
                self.reaped = true;
                return status;
            }
            assert!(
                start.elapsed() < limit,
                "still running after {limit:?}:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        if !self.reaped {
            // SAFETY: signalling the process group this helper started (its leader not
            // yet waited for, so the id is still its).
            unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
            let _ = self.child.wait();
        }
    }
}
