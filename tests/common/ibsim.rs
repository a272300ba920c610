//! ibsim (`ibsim-utils`): a simulated InfiniBand fabric of switches and adapters from a
//! net file, under which the real `ibnetdiscover`, libibnetdisc and OpenSM run as on
//! hardware (`libumad2sim.so` preloaded). Each test's ibsim has its own socket.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use inventory::switches::Topology;

/// The library that puts ibsim under libibumad (what `ibsim-run` preloads).
pub const UMAD2SIM: &str = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so";

/// An ibsim of its own (its socket named for this test), stopped when dropped (its
/// process group is).
pub struct Ibsim {
    /// Held for its drop, which ends ibsim's process group; its console is its stdin.
    group: super::Group,
    /// Its socket's name (`IBSIM_SOCKNAME` of the programs that use it).
    pub socket: String,
    _out: [std::sync::mpsc::Receiver<String>; 2],
}

impl Ibsim {
    /// Starts ibsim on `net` and waits until it says it is ready (its socket is then
    /// served: ibnetdiscover reaches it at once).
    pub fn start(net: &Path, name: &str) -> Ibsim {
        let socket = format!("maestro-{name}-{}", std::process::id());
        let mut group = super::Group::spawn_with_stdin(
            Command::new("ibsim")
                .arg("-s")
                .arg(net)
                .env("IBSIM_SOCKNAME", &socket),
            Stdio::piped(),
        );
        let out = [
            super::lines(group.child.stdout.take().expect("stdout")),
            super::lines(group.child.stderr.take().expect("stderr")),
        ];
        super::expect_line(
            &out[0],
            &["Network simulator ready."],
            Duration::from_secs(10),
        );
        Ibsim {
            group,
            socket,
            _out: out,
        }
    }

    /// ibnetdiscover's dump of the simulated fabric, once it answers.
    pub fn ibnetdiscover(&self) -> Option<String> {
        let out = self.run(Command::new("ibsim-run").arg("ibnetdiscover"));
        (out.code() == Some(0) && out.stdout.contains("Switch")).then_some(out.stdout)
    }

    /// Types `command` into ibsim's console (`Unlink "s1"[2]`).
    pub fn console(&mut self, command: &str) {
        use std::io::Write;
        let stdin = self.group.child.stdin.as_mut().expect("ibsim's console");
        writeln!(stdin, "{command}").expect("write to ibsim's console");
        stdin.flush().expect("flush ibsim's console");
    }

    /// `cmd` (an `ibsim-run ...`) against this ibsim.
    pub fn run(&self, cmd: &mut Command) -> super::Output {
        super::run(
            cmd.env("IBSIM_SOCKNAME", &self.socket),
            Duration::from_secs(30),
        )
    }

    /// The topology `maestro inventory --discover-fabric --json` discovers (libibnetdisc
    /// through the simulated adapter), and how long the command took.
    pub fn discover(&self) -> (Topology, Duration) {
        let started = Instant::now();
        let out = self.run(Command::new("ibsim-run").arg(super::maestro()).args([
            "inventory",
            "--discover-fabric",
            "--json",
        ]));
        let took = started.elapsed();
        assert_eq!(out.code(), Some(0), "{}", out.stderr);
        let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
        let t = serde_json::from_value(v["topology"].clone()).expect("a topology");
        (t, took)
    }
}

impl Ibsim {
    /// The environment a program needs to use this ibsim (as `ibsim-run` gives it).
    pub fn env(&self) -> [(&str, &str); 2] {
        [("LD_PRELOAD", UMAD2SIM), ("IBSIM_SOCKNAME", &self.socket)]
    }
}

/// A fat tree: `spines` spines, `leaves` leaves each linked once to every spine, and
/// `per_leaf` adapters on each leaf, as an ibsim net file.
pub fn fat_tree(spines: usize, leaves: usize, per_leaf: usize) -> String {
    let mut net = String::new();
    for s in 1..=spines {
        net += &format!("Switch\t36 \"spine{s}\"\n");
        for l in 1..=leaves {
            net += &format!("[{l}]\t\"leaf{l}\"[{}]\n", per_leaf + s);
        }
        net += "\n";
    }
    for l in 1..=leaves {
        net += &format!("Switch\t36 \"leaf{l}\"\n");
        for h in 1..=per_leaf {
            net += &format!("[{h}]\t\"n{}\"[1]\n", (l - 1) * per_leaf + h);
        }
        for s in 1..=spines {
            net += &format!("[{}]\t\"spine{s}\"[{l}]\n", per_leaf + s);
        }
        net += "\n";
    }
    for l in 1..=leaves {
        for h in 1..=per_leaf {
            net += &format!(
                "Hca\t2 \"n{}\"\n[1]\t\"leaf{l}\"[{h}]\n\n",
                (l - 1) * per_leaf + h
            );
        }
    }
    net
}
