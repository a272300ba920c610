//! Progress of long work on stderr, for people waiting at a terminal and for logs: where
//! stderr is a terminal, one line redrawn in place (a bar, the count and the time, at most
//! ten times a second) and cleared at the end; elsewhere (a batch job's log, a launcher's
//! pipe) a plain line every [`LOG_EVERY`], none for work shorter than that. Cheap enough
//! for a benchmark's timed loop: the clock is read only each time the count moved by a
//! thousandth of the total.

use std::io::Write;
use std::time::{Duration, Instant};

/// How often a line is written where stderr is not a terminal.
pub const LOG_EVERY: Duration = Duration::from_secs(5);
/// How often the bar is redrawn on a terminal.
const REDRAW_EVERY: Duration = Duration::from_millis(100);
/// Characters of the bar.
const BAR: usize = 24;

/// How the count reads: a number of things (`CDOs`) or bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Things named thus (`"CDOs"`).
    Count(&'static str),
    /// Bytes (shown in KiB, MiB, GiB).
    Bytes,
}

/// Progress of one piece of work of a known size. Dropping it ends it as [`Progress::finish`]
/// does.
pub struct Progress {
    label: String,
    unit: Unit,
    total: u64,
    done: u64,
    /// The count at which the clock is read next.
    next_check: u64,
    start: Instant,
    /// When something was last written.
    shown: Instant,
    terminal: bool,
    drawn: bool,
    out: Box<dyn Write + Send>,
}

impl Progress {
    /// Progress of `total` (in `unit`) named `label`, on stderr.
    pub fn stderr(label: impl Into<String>, unit: Unit, total: u64) -> Progress {
        use std::io::IsTerminal;
        let terminal = std::io::stderr().is_terminal();
        Progress::to(label, unit, total, terminal, Box::new(std::io::stderr()))
    }

    /// Progress written to `out`, drawn as on a terminal if `terminal`, starting now.
    pub fn to(
        label: impl Into<String>,
        unit: Unit,
        total: u64,
        terminal: bool,
        out: Box<dyn Write + Send>,
    ) -> Progress {
        let now = Instant::now();
        Progress {
            label: label.into(),
            unit,
            total,
            done: 0,
            next_check: 0,
            start: now,
            shown: now,
            terminal,
            drawn: false,
            out,
        }
    }

    /// `n` more done.
    pub fn add(&mut self, n: u64) {
        self.done = self.done.saturating_add(n);
        if self.done >= self.next_check {
            self.next_check = self.done + (self.total / 1000).max(1);
            self.tick(Instant::now());
        }
    }

    /// Writes what is due at `now` (a redraw, a log line, or nothing).
    pub fn tick(&mut self, now: Instant) {
        let since = now.saturating_duration_since(self.shown);
        let line = if self.terminal {
            if since < REDRAW_EVERY && self.drawn {
                return;
            }
            format!("\r\x1b[2K{}", self.bar(now))
        } else {
            if since < LOG_EVERY {
                return;
            }
            format!("{}\n", self.line(now))
        };
        self.shown = now;
        self.drawn = true;
        // Progress is a courtesy: a closed stderr must not fail the work.
        let _ = self
            .out
            .write_all(line.as_bytes())
            .and_then(|()| self.out.flush());
    }

    /// Ends the progress: the bar is cleared from the terminal (what the program prints
    /// next takes its line); a log gets no last line.
    pub fn finish(mut self) {
        self.clear();
    }

    fn clear(&mut self) {
        if self.terminal && self.drawn {
            let _ = self
                .out
                .write_all(b"\r\x1b[2K")
                .and_then(|()| self.out.flush());
            self.drawn = false;
        }
    }

    /// `270 of 600 CDOs`, `1.0 GiB of 4.0 GiB`.
    fn amounts(&self) -> String {
        match self.unit {
            Unit::Count(what) => format!("{} of {} {what}", self.done, self.total),
            Unit::Bytes => format!("{} of {}", bytes(self.done), bytes(self.total)),
        }
    }

    fn fraction(&self) -> f64 {
        if self.total == 0 {
            1.0
        } else {
            (self.done as f64 / self.total as f64).min(1.0)
        }
    }

    /// `label: 270 of 600 CDOs (45 %), 9.1 s`.
    fn line(&self, now: Instant) -> String {
        format!(
            "{}: {} ({:.0} %), {:.1} s",
            self.label,
            self.amounts(),
            self.fraction() * 100.0,
            now.saturating_duration_since(self.start).as_secs_f64()
        )
    }

    /// `label [##########--------------] 270 of 600 CDOs (45 %), 9.1 s`.
    fn bar(&self, now: Instant) -> String {
        let full = (self.fraction() * BAR as f64).round() as usize;
        let (head, rest) = self.line(now).split_once(": ").map_or_else(
            || (self.label.clone(), String::new()),
            |(h, r)| (h.to_string(), r.to_string()),
        );
        format!(
            "{head} [{}{}] {rest}",
            "#".repeat(full),
            "-".repeat(BAR - full)
        )
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

/// `n` bytes in the largest binary unit that keeps a digit before the point (`1.5 KiB`):
/// how the tools show sizes to people.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A writer whose bytes the test reads.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().expect("lock").clone()).expect("utf-8")
        }
    }

    #[test]
    fn a_log_gets_a_line_every_few_seconds_and_nothing_for_short_work() {
        let out = Shared::default();
        let mut p = Progress::to(
            "consumer",
            Unit::Count("CDOs"),
            600,
            false,
            Box::new(out.clone()),
        );
        let t0 = p.start;
        p.done = 270;
        p.tick(t0 + Duration::from_secs(1));
        assert_eq!(out.text(), "", "nothing before {LOG_EVERY:?}");
        p.tick(t0 + Duration::from_millis(5100));
        assert_eq!(out.text(), "consumer: 270 of 600 CDOs (45 %), 5.1 s\n");
        p.tick(t0 + Duration::from_secs(7));
        assert_eq!(
            out.text().lines().count(),
            1,
            "not again within {LOG_EVERY:?}"
        );
        p.done = 600;
        p.tick(t0 + Duration::from_millis(10_200));
        assert!(
            out.text()
                .ends_with("consumer: 600 of 600 CDOs (100 %), 10.2 s\n")
        );
        p.finish();
        assert_eq!(out.text().lines().count(), 2, "no last line, no clearing");
    }

    #[test]
    fn a_terminal_gets_a_bar_redrawn_in_place_and_cleared_at_the_end() {
        let out = Shared::default();
        let mut p = Progress::to("fabric", Unit::Bytes, 4 << 30, true, Box::new(out.clone()));
        let t0 = p.start;
        p.done = 1 << 30;
        p.tick(t0 + Duration::from_millis(50));
        assert_eq!(
            out.text(),
            "\r\x1b[2Kfabric [######------------------] 1.0 GiB of 4.0 GiB (25 %), 0.1 s"
        );
        p.tick(t0 + Duration::from_millis(120));
        assert_eq!(
            out.text().matches('\r').count(),
            1,
            "at most ten redraws a second"
        );
        p.tick(t0 + Duration::from_millis(160));
        assert_eq!(out.text().matches('\r').count(), 2);
        drop(p);
        assert!(out.text().ends_with("\r\x1b[2K"), "cleared when dropped");
    }

    #[test]
    fn the_clock_is_read_each_thousandth_of_the_total() {
        let out = Shared::default();
        let mut p = Progress::to(
            "x",
            Unit::Count("reads"),
            1_000_000,
            true,
            Box::new(out.clone()),
        );
        p.add(1);
        assert_eq!(p.next_check, 1001);
        p.add(999);
        assert_eq!(p.next_check, 1001, "not yet");
        p.add(1);
        assert_eq!(p.next_check, 2001);
        // Zero work is whole at once and never divides by zero.
        let mut none = Progress::to("none", Unit::Count("CDOs"), 0, false, Box::new(out));
        none.add(0);
        assert_eq!(none.fraction(), 1.0);
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
    }
}
