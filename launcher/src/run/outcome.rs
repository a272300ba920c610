//! How a job ends: which ranks failed and what `maestro run` exits with.
//!
//! Rules: the exit code is the worst status among ranks that ended on their own (a signal
//! death counts as 128+signal); ranks the launcher itself killed while tearing the job down
//! do not count, whichever job they belong to; a `PMIx_Abort` contributes its status (at least 1); a launcher stopped by a
//! signal exits with at least 128+signal; a job past its time limit with at least 124.

use std::collections::BTreeMap;

use crate::run::jobs::RankId;

/// How one rank ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RankEnd {
    /// Exited with a status.
    Exited(i32),
    /// Killed by a signal.
    Signaled(i32),
}

impl RankEnd {
    /// From a wait status.
    pub fn from_status(st: std::process::ExitStatus) -> RankEnd {
        use std::os::unix::process::ExitStatusExt;
        match (st.code(), st.signal()) {
            (Some(c), _) => RankEnd::Exited(c),
            (None, Some(s)) => RankEnd::Signaled(s),
            (None, None) => RankEnd::Exited(1),
        }
    }

    /// The shell-style code: the status, or 128+signal.
    pub fn code(self) -> i32 {
        match self {
            RankEnd::Exited(c) => c,
            RankEnd::Signaled(s) => 128 + s,
        }
    }
}

/// Why the job is being stopped before all ranks ended on their own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopCause {
    /// A rank failed (non-zero exit, signal, or exit without finalize).
    RankFailed {
        /// The rank.
        rank: RankId,
        /// Its code.
        code: i32,
    },
    /// A rank called `PMIx_Abort`.
    Abort {
        /// The rank.
        rank: RankId,
        /// The abort status.
        status: i32,
    },
    /// The launcher received a signal.
    Signal(i32),
    /// The job's `--timeout` ran out (exit code 124, as timeout(1)).
    TimeLimit,
}

/// The record of a job's end.
#[derive(Debug, Default)]
pub struct Outcome {
    ends: BTreeMap<RankId, (RankEnd, bool)>,
    cause: Option<StopCause>,
    /// Some of the ranks' output could not be written.
    lost: bool,
}

impl Outcome {
    /// Records that `rank` ended; `killed_by_us` when the launcher had signalled it.
    pub fn rank_ended(&mut self, rank: RankId, end: RankEnd, killed_by_us: bool) {
        self.ends.insert(rank, (end, killed_by_us));
    }

    /// Records the first reason to stop the job; later ones are ignored. Returns whether this
    /// was the first.
    pub fn stop(&mut self, cause: StopCause) -> bool {
        if self.cause.is_some() {
            return false;
        }
        self.cause = Some(cause);
        true
    }

    /// Why the jobs are being stopped, in words for the user (`None`: they are not).
    pub fn cause_words(&self) -> Option<String> {
        Some(match self.cause.as_ref()? {
            StopCause::RankFailed { rank, code } => format!("rank {rank} failed (status {code})"),
            StopCause::Abort { rank, status } => format!("rank {rank} called PMIx_Abort({status})"),
            StopCause::Signal(sig) => format!("maestro run received signal {sig}"),
            StopCause::TimeLimit => "the time limit was reached".into(),
        })
    }

    /// Records that the ranks' output could not be written (the launcher then exits with
    /// at least 1); returns whether this is the first time.
    pub fn output_lost(&mut self) -> bool {
        !std::mem::replace(&mut self.lost, true)
    }

    /// Whether a reason to stop was recorded (the jobs are being stopped).
    pub fn stopping(&self) -> bool {
        self.cause.is_some()
    }

    /// The exit code of `maestro run`.
    pub fn exit_code(&self) -> i32 {
        let own = self
            .ends
            .values()
            .filter(|(_, killed)| !killed)
            .map(|(e, _)| e.code())
            .max()
            .unwrap_or(0);
        let cause = match self.cause {
            Some(StopCause::Abort { status, .. }) => status.max(1),
            Some(StopCause::Signal(s)) => 128 + s,
            Some(StopCause::RankFailed { code, .. }) => code,
            Some(StopCause::TimeLimit) => 124,
            None => 0,
        };
        own.max(cause).max(i32::from(self.lost)).clamp(0, 255)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_own_status_wins() {
        let mut o = Outcome::default();
        o.rank_ended(RankId::first(0), RankEnd::Exited(0), false);
        o.rank_ended(RankId::first(1), RankEnd::Exited(1), false);
        o.rank_ended(RankId::first(2), RankEnd::Exited(2), false);
        assert_eq!(o.exit_code(), 2);
    }

    #[test]
    fn launcher_kills_do_not_count() {
        let mut o = Outcome::default();
        assert!(o.stop(StopCause::RankFailed {
            rank: RankId::first(1),
            code: 3,
        }));
        o.rank_ended(RankId::first(1), RankEnd::Exited(3), false);
        o.rank_ended(RankId::first(0), RankEnd::Signaled(15), true);
        assert_eq!(o.exit_code(), 3);
    }

    #[test]
    fn signal_death_maps_to_128_plus() {
        let mut o = Outcome::default();
        o.rank_ended(RankId::first(0), RankEnd::Signaled(9), false);
        assert_eq!(o.exit_code(), 137);
    }

    #[test]
    fn abort_and_signal_causes() {
        let mut o = Outcome::default();
        assert!(o.stop(StopCause::Abort {
            rank: RankId::first(0),
            status: 0,
        }));
        assert!(!o.stop(StopCause::Signal(15)));
        o.rank_ended(RankId::first(0), RankEnd::Signaled(15), true);
        assert_eq!(o.exit_code(), 1);
        let mut o = Outcome::default();
        o.stop(StopCause::Signal(15));
        o.rank_ended(RankId::first(0), RankEnd::Signaled(15), true);
        assert_eq!(o.exit_code(), 143);
    }
}
