//! Text renderings of `maestro pool`'s views: aligned tables, sizes and times as people
//! write them.

use pool::view::{AppNic, AppView, CdoPage, Fabric, Status, TransferView, Transfers};

/// Columns aligned: the first row holds the headers; numbers (cells that start with a
/// digit) align right.
fn table(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, &w)| {
                if c.starts_with(|ch: char| ch.is_ascii_digit()) {
                    format!("{c:>w$}")
                } else {
                    format!("{c:<w$}")
                }
            })
            .collect();
        out.push_str("  ");
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

pub use crate::progress::bytes;

/// `2.5 s`, `3 min`, `1.2 h`.
pub fn seconds(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.1} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

/// `850 us`, `26.5 ms`, `3.2 s`.
pub fn micros(us: u64) -> String {
    if us < 10_000 {
        format!("{us} us")
    } else if us < 10_000_000 {
        format!("{:.1} ms", us as f64 / 1e3)
    } else {
        seconds(us as f64 / 1e6)
    }
}

fn opt(s: Option<&str>) -> String {
    s.unwrap_or("-").to_string()
}

fn counts<'a>(items: impl Iterator<Item = (&'a String, &'a u64)>) -> String {
    let parts: Vec<String> = items.map(|(k, v)| format!("{k} {v}")).collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

fn app_row(a: &AppView, now_ns: i128) -> Vec<String> {
    let since = ((now_ns - a.joined_unix_ns).max(0) as f64) / 1e9;
    vec![
        a.id.to_string(),
        format!("{}:{}", a.component, a.index),
        opt(Some(a.job.as_str()).filter(|j| !j.is_empty())),
        a.host.clone(),
        a.pid.map_or("-".into(), |p| p.to_string()),
        opt(a.provider.as_deref()),
        opt(a.nic.as_deref()),
        opt(a.address.as_deref()),
        format!("{} ago", seconds(since)),
        a.cdos.to_string(),
        a.offered.to_string(),
        a.demanded.to_string(),
        bytes(a.bytes_sent),
        bytes(a.bytes_received),
    ]
}

/// The status's line on failover: the PM's generation, the grace period left of one that
/// took over, where its standbys run.
fn failover(s: &Status) -> String {
    let grace = s.grace_ms.map_or(String::new(), |ms| {
        format!(
            ", taking over: {} of grace left (only apps of the PM that is gone join)",
            seconds(ms as f64 / 1e3)
        )
    });
    let standbys = if s.standbys.is_empty() {
        "no standby".to_string()
    } else {
        format!("standby on {}", s.standbys.join(", "))
    };
    format!("generation {:x}{grace}, {standbys}\n", s.generation)
}

/// `maestro pool status`.
pub fn status(s: &Status) -> String {
    let total: u64 = s.operations.values().sum();
    let mut out = format!(
        "pool manager of workflow {:?} (protocol {}), up {}, {total} operations ({:.0}/s), {} resident, {} inline\n",
        s.workflow,
        s.protocol,
        seconds(s.uptime_ms as f64 / 1e3),
        s.operations_per_second,
        s.memory_bytes.map_or("?".into(), bytes),
        bytes(s.inline_bytes),
    );
    out += &format!(
        "apps {}, observers {} (this one included), subscriptions {}, transfers in flight {}\n",
        s.app_count, s.observer_count, s.subscriptions, s.transfers_in_flight
    );
    out += &failover(s);
    out += &shards(s);
    out += &format!("CDOs: {}\n", counts(s.cdos.iter().filter(|(_, n)| **n > 0)));
    out += &format!("operations: {}\n", counts(s.operations.iter()));
    if s.apps.is_empty() {
        return out + "no apps joined\n";
    }
    // Which jobs and hosts share the pool (apps without a launcher count as one job "-").
    let jobs: std::collections::BTreeSet<&str> = s.apps.iter().map(|a| a.job.as_str()).collect();
    let hosts: std::collections::BTreeSet<&str> = s.apps.iter().map(|a| a.host.as_str()).collect();
    out += &format!(
        "jobs {}, hosts {}{}\n",
        jobs.len(),
        hosts.len(),
        if s.apps.len() < s.app_count as usize {
            " (of the apps listed)"
        } else {
            ""
        }
    );
    let now_ns = now_ns();
    let mut rows = vec![
        [
            "app",
            "component",
            "job",
            "host",
            "pid",
            "provider",
            "nic",
            "address",
            "joined",
            "cdos",
            "offered",
            "demanded",
            "sent",
            "received",
        ]
        .map(String::from)
        .to_vec(),
    ];
    rows.extend(s.apps.iter().map(|a| app_row(a, now_ns)));
    out + "\n" + &table(&rows)
}

/// The shards of a sharded pool, one line each (nothing for a pool of one manager).
fn shards(s: &Status) -> String {
    if s.shards.len() < 2 {
        return String::new();
    }
    let mut out = format!("one pool of {} shards:\n", s.shards.len());
    for x in &s.shards {
        out += &format!(
            "  shard {} of {}: {} CDOs, {:.0} operations/s, {} resident, generation {:x}\n",
            x.index,
            x.count,
            x.cdos,
            x.operations_per_second,
            x.memory_bytes.map_or("?".into(), bytes),
            x.generation
        );
    }
    out
}

/// `maestro pool ls`.
pub fn cdos(page: &CdoPage, attributes: bool) -> String {
    let mut rows = vec![
        [
            "id",
            "name",
            "size",
            "state",
            "app",
            "providers",
            "waiting",
            "age",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for c in &page.cdos {
        rows.push(vec![
            c.id.to_string(),
            c.name.clone(),
            c.size.map_or("-".into(), bytes),
            c.state.clone(),
            c.app.clone(),
            if c.providers.is_empty() {
                "-".into()
            } else {
                c.providers.join(",")
            },
            c.waiting.to_string(),
            seconds(c.age_s as f64),
        ]);
    }
    let mut out = table(&rows);
    if attributes {
        for c in page.cdos.iter().filter(|c| !c.attributes.is_empty()) {
            out += &format!("\n  {}:\n", c.name);
            for (k, v) in &c.attributes {
                out += &format!("    {k} = {v}\n");
            }
        }
    }
    out += &format!(
        "\n{} listed of {} live CDOs{}\n",
        page.cdos.len(),
        page.total,
        page.next.map_or(String::new(), |n| format!(
            " (more after id {n}: --limit 0 lists all)"
        ))
    );
    out
}

fn transfer_rows(list: &[TransferView]) -> String {
    let mut rows = vec![
        [
            "id",
            "name",
            "from",
            "to",
            "transport",
            "provider",
            "nic",
            "bytes",
            "time",
            "rate",
            "outcome",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for t in list {
        let secs = t.elapsed_us as f64 / 1e6;
        let rate = if secs > 0.0 {
            format!("{}/s", bytes((t.bytes as f64 / secs) as u64))
        } else {
            "-".into()
        };
        let outcome = match (t.ok, &t.error) {
            (None, _) => "in flight".to_string(),
            (Some(true), _) => "done".to_string(),
            (Some(false), e) => format!("failed: {}", e.as_deref().unwrap_or("?")),
        };
        rows.push(vec![
            t.id.to_string(),
            t.name.clone(),
            t.from.clone(),
            t.to.clone(),
            t.transport.name().to_string(),
            opt(t.provider.as_deref()),
            opt(t.nic.as_deref()),
            bytes(t.bytes),
            micros(t.elapsed_us),
            rate,
            outcome,
        ]);
    }
    table(&rows)
}

/// `maestro pool transfers`.
pub fn transfers(t: &Transfers) -> String {
    let mut out = format!(
        "transfers: {} in flight, {} completed, {} failed since the start\n",
        t.in_flight_total, t.completed, t.failed
    );
    if !t.in_flight.is_empty() {
        out += "\nin flight:\n";
        out += &transfer_rows(&t.in_flight);
    }
    if !t.recent.is_empty() {
        // Newest first, as `top` lists: a view cut to a terminal keeps the latest.
        let newest_first: Vec<TransferView> = t.recent.iter().rev().cloned().collect();
        out += &format!("\nrecent (last {}, newest first):\n", t.recent.len());
        out += &transfer_rows(&newest_first);
    }
    out
}

/// `text` cut to a terminal of `rows` x `cols` for `--watch` (`header` lines are drawn
/// above it): each line at most `cols` characters (a cut line ends in `>`), and lines past
/// the screen replaced by one saying how many were left out and how to see them all.
pub fn fit(text: &str, rows: usize, cols: usize, header: usize) -> String {
    let cols = cols.max(1);
    let cut = |line: &str| -> String {
        if line.chars().count() <= cols {
            line.to_string()
        } else {
            let mut s: String = line.chars().take(cols - 1).collect();
            s.push('>');
            s
        }
    };
    let lines: Vec<&str> = text.lines().collect();
    let room = rows.saturating_sub(header).max(1);
    let mut out: Vec<String> = Vec::with_capacity(room);
    if lines.len() <= room {
        out.extend(lines.iter().map(|l| cut(l)));
    } else {
        out.extend(lines[..room - 1].iter().map(|l| cut(l)));
        let left = lines.len() - (room - 1);
        out.push(cut(&format!(
            "... {left} more lines (a larger terminal, or without --watch, shows them)"
        )));
    }
    out.join("\n") + "\n"
}

/// `maestro pool fabric`.
pub fn fabric(f: &Fabric) -> String {
    let mut out = nic_traffic(f);
    let by: Vec<String> = f
        .transports
        .iter()
        .map(|(k, t)| {
            format!(
                "{k} {} in {} ({} failed)",
                bytes(t.bytes),
                t.transfers,
                t.failures
            )
        })
        .collect();
    out += &format!(
        "\nby transport: {}\n",
        if by.is_empty() {
            "none".into()
        } else {
            by.join("; ")
        }
    );
    out += &format!(
        "links down: {}\n",
        if f.links_down.is_empty() {
            "none".into()
        } else {
            f.links_down.join(", ")
        }
    );
    out += &app_nics(f);
    if !f.events.is_empty() {
        out += "\nfabric events:\n";
        for e in &f.events {
            out += &format!("  {}\n", e.detail);
        }
    }
    out
}

/// The traffic per NIC and provider of [`fabric()`].
fn nic_traffic(f: &Fabric) -> String {
    let mut out = String::from("traffic per NIC and provider:\n");
    if f.nics.is_empty() {
        out += "  nothing moved yet\n";
    } else {
        let mut rows = vec![
            [
                "host",
                "nic",
                "provider",
                "out",
                "in",
                "transfers out",
                "transfers in",
                "failures",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for n in &f.nics {
            rows.push(vec![
                n.host.clone(),
                n.nic.clone(),
                if n.provider.is_empty() {
                    "-".into()
                } else {
                    n.provider.clone()
                },
                bytes(n.bytes_out),
                bytes(n.bytes_in),
                n.transfers_out.to_string(),
                n.transfers_in.to_string(),
                n.failures.to_string(),
            ]);
        }
        out += &table(&rows);
    }
    out
}

/// The NIC of each app, of [`fabric()`] (empty without apps).
/// An app's endpoints as `nic/provider`, the first first (`-`: none; a PM older than the
/// providers list gives the first endpoint's provider only).
fn endpoints(a: &AppNic) -> String {
    if a.nics.is_empty() {
        return "-".into();
    }
    a.nics
        .iter()
        .enumerate()
        .map(|(i, nic)| {
            let provider = a.providers.get(i).map(String::as_str).or(if i == 0 {
                a.provider.as_deref()
            } else {
                None
            });
            provider.map_or_else(|| nic.clone(), |p| format!("{nic}/{p}"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn app_nics(f: &Fabric) -> String {
    let mut out = String::new();
    if !f.apps.is_empty() {
        out += "\nNIC of each app:\n";
        let mut rows = vec![
            [
                "app",
                "component",
                "host",
                "endpoints (nic/provider)",
                "address",
                "network NIC, why",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for a in &f.apps {
            rows.push(vec![
                a.app.to_string(),
                a.label.clone(),
                a.host.clone(),
                endpoints(a),
                opt(a.address.as_deref()),
                opt(a.reason.as_deref()),
            ]);
        }
        out += &table(&rows);
    }
    out
}

/// Now in ns since the Unix epoch.
fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_times_read_as_people_write_them() {
        assert_eq!(bytes(1000), "1000 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(16 << 20), "16.0 MiB");
        assert_eq!(seconds(2.25), "2.2 s");
        assert_eq!(seconds(600.0), "10 min");
        assert_eq!(micros(850), "850 us");
        assert_eq!(micros(26_468), "26.5 ms");
    }

    #[test]
    fn tables_align_numbers_right_and_text_left() {
        let rows = vec![
            vec!["name".to_string(), "bytes".to_string()],
            vec!["a".to_string(), "7".to_string()],
            vec!["longer".to_string(), "1000".to_string()],
        ];
        assert_eq!(
            table(&rows),
            "  name    bytes\n  a           7\n  longer   1000\n"
        );
    }

    #[test]
    fn a_watched_view_fits_the_terminal_and_says_what_it_left_out() {
        let text: String = (0..10)
            .map(|i| format!("line {i} {}\n", "x".repeat(i * 3)))
            .collect();
        let fitted = fit(&text, 8, 12, 2);
        let lines: Vec<&str> = fitted.lines().collect();
        assert_eq!(lines.len(), 6, "{fitted}");
        assert!(lines.iter().all(|l| l.chars().count() <= 12), "{fitted}");
        assert_eq!(lines[0], "line 0 ");
        assert_eq!(lines[3], "line 3 xxxx>");
        assert_eq!(lines[5], "... 5 more >");
        // What fits is left alone; a screen too small still shows a line.
        assert_eq!(fit("a\nb\n", 24, 80, 2), "a\nb\n");
        assert_eq!(fit("a\nb\nc\n", 1, 80, 2).lines().count(), 1);
    }

    /// An app's same-host endpoint listed first is shown as such, beside the network NIC
    /// its reason names.
    #[test]
    fn each_endpoint_shows_its_nic_and_provider_apart_from_the_network_nics_reason() {
        let f = Fabric {
            apps: vec![AppNic {
                app: 1,
                label: "producer:0".into(),
                host: "n1".into(),
                nics: vec!["shm".into(), "eth0".into()],
                provider: Some("shm".into()),
                address: None,
                reason: Some("eth0, chosen by the PMIx host".into()),
                providers: vec!["shm".into(), "tcp;ofi_rxm".into()],
            }],
            ..Fabric::default()
        };
        let text = app_nics(&f);
        let row = text
            .lines()
            .find(|l| l.contains("producer:0"))
            .expect("the app's row");
        assert!(row.contains("shm/shm, eth0/tcp;ofi_rxm"), "{text}");
        assert!(row.ends_with("eth0, chosen by the PMIx host"), "{text}");
        assert!(text.contains("network NIC, why"), "{text}");
        // From a PM that sends no providers list: the first endpoint's provider.
        let old = AppNic {
            providers: Vec::new(),
            ..f.apps[0].clone()
        };
        assert_eq!(endpoints(&old), "shm/shm, eth0");
    }
}
