//! Programs on a pseudo-terminal of a given size, as a person at a terminal runs them: what
//! they draw is read back to check that it fits.

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What a program wrote to its terminal, and whether the terminal closed (every holder of
/// its other side gone), with the condition its reader signals.
type Screen = Arc<(Mutex<(Vec<u8>, bool)>, Condvar)>;

/// A program whose standard input, output and error are one pseudo-terminal; its process
/// group is killed when this is dropped.
pub struct Pty {
    child: std::process::Child,
    /// Whether its leader was waited for (its group is then killed already).
    reaped: bool,
    /// Everything it wrote so far.
    screen: Screen,
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
        let screen: Screen = Arc::default();
        let sink = Arc::clone(&screen);
        let mut master = std::fs::File::from(master);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            let (lock, wrote) = &*sink;
            // EIO once the last holder of the terminal's other side is gone.
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 {
                    break;
                }
                lock.lock().expect("lock").0.extend_from_slice(&buf[..n]);
                wrote.notify_all();
            }
            lock.lock().expect("lock").1 = true;
            wrote.notify_all();
        });
        Pty {
            child,
            reaped: false,
            screen,
        }
    }

    /// What it wrote so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.screen.0.lock().expect("lock").0).into_owned()
    }

    /// Waits within `limit`, woken by each write, until what it wrote satisfies `done`
    /// (with `done` `None`: until its terminal closed); panics with the text otherwise.
    fn wait_until(&self, limit: Duration, done: Option<&dyn Fn(&str) -> bool>) -> String {
        let deadline = Instant::now() + limit;
        let (lock, wrote) = &*self.screen;
        let mut screen = lock.lock().expect("lock");
        loop {
            let text = String::from_utf8_lossy(&screen.0).into_owned();
            match done {
                Some(f) if f(&text) => return text,
                None if screen.1 => return text,
                _ => {}
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "not seen within {limit:?}:\n{text}");
            screen = wrote.wait_timeout(screen, left).expect("lock").0;
        }
    }

    /// Waits within `limit` until what it wrote satisfies `done`; panics with it otherwise.
    pub fn wait_for(&self, limit: Duration, done: impl Fn(&str) -> bool) -> String {
        self.wait_until(limit, Some(&done))
    }

    /// Waits within `limit` for it to end (its terminal closes, then its process is gone):
    /// its status.
    pub fn wait(mut self, limit: Duration) -> std::process::ExitStatus {
        let text = self.wait_until(limit, None);
        let pid = self.child.id() as i32;
        assert!(
            super::wait_gone(pid, limit),
            "closed its terminal but still runs after {limit:?}:\n{text}"
        );
        let status = self.child.wait().expect("wait");
        // What it left in its group goes too.
        // SAFETY: signalling the process group this helper started.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        self.reaped = true;
        status
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
