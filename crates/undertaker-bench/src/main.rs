//! `undertaker-bench`: undertaker side by side with tini, dumb-init, catatonit, killpg
//! and cgroup.kill. Contenders take turns (A B A B …) and every ratio comes from the
//! same run; absolute times are for orientation only.
#![deny(unsafe_code)]

#[cfg(target_os = "linux")]
mod env;
mod measure;
#[cfg(target_os = "linux")]
mod procs;
#[cfg(target_os = "linux")]
mod report;
#[cfg(target_os = "linux")]
mod scenarios;
mod stats;

#[cfg(target_os = "linux")]
fn main() -> std::process::ExitCode {
    linux_main::main()
}

#[cfg(not(target_os = "linux"))]
fn main() -> std::process::ExitCode {
    eprintln!("undertaker-bench runs on Linux only");
    std::process::ExitCode::from(1)
}

#[cfg(target_os = "linux")]
mod linux_main {
    use crate::env::{machine, Env};
    use crate::measure::{self, Attempt, Contender, Measurement, Spec};
    use crate::{procs, report, scenarios};
    use clap::Parser;
    use scenarios::Config;
    use std::path::PathBuf;
    use std::process::ExitCode;

    #[derive(Parser, Debug)]
    #[command(
        name = "undertaker-bench",
        about = "Benchmark undertaker against tini, dumb-init, catatonit, killpg and cgroup.kill."
    )]
    struct Args {
        /// Fewer rounds: finishes in under two minutes on a small machine.
        #[arg(long)]
        quick: bool,
        /// Print one JSON document instead of the table.
        #[arg(long)]
        json: bool,
        /// The undertaker binary (default: next to this program).
        #[arg(long, value_name = "PATH")]
        undertaker: Option<PathBuf>,
        /// Run only the measurements whose key starts with PREFIX (e.g. teardown_1000;
        /// several, comma-separated: spawn,exit_latency,registry_100).
        #[arg(long, value_name = "PREFIX")]
        only: Option<String>,
    }

    pub fn main() -> ExitCode {
        // Hidden modes: the bench binary is also the tree and the exit stamper.
        let raw: Vec<String> = std::env::args().collect();
        match raw.get(1).map(String::as_str) {
            Some("__tree") => procs::tree_main(&raw[2..]),
            Some("__stamp") => procs::stamp_main(),
            _ => {}
        }
        let args = Args::parse();
        match run(&args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("undertaker-bench: {e:#}");
                ExitCode::from(1)
            }
        }
    }

    /// A measurement whose setup failed: every contender reports the failure.
    fn failed(key: String, why: String) -> Measurement {
        measure::run(
            Spec {
                key,
                what: "setup failed".into(),
                unit: "ms",
                size: None,
                rounds: 0,
                anchors: vec![],
            },
            vec![Contender::new("setup", move || {
                Attempt::Failed(why.clone())
            })],
        )
    }

    fn run(args: &Args) -> anyhow::Result<ExitCode> {
        let env = Env::discover(args.undertaker.clone())?;
        let smoke = std::env::var_os("UNDERTAKER_BENCH_SMOKE").is_some_and(|v| v == "1");
        let (cfg, mode) = if smoke {
            (Config::smoke(), "smoke")
        } else if args.quick {
            (Config::quick(), "quick")
        } else {
            (Config::full(), "full")
        };
        let wanted =
            |k: &str| (args.only.as_deref()).is_none_or(|p| p.split(',').any(|p| k.starts_with(p)));
        let progress = |k: &str| eprintln!("undertaker-bench: measuring {k} …");
        let mut ms: Vec<Measurement> = Vec::new();
        if wanted("spawn") {
            progress("spawn");
            ms.push(scenarios::spawn(&env, &cfg));
            progress("spawn_cpu");
            ms.push(scenarios::spawn_cpu(&env, &cfg));
        }
        if wanted("exit_latency") {
            progress("exit_latency");
            ms.push(scenarios::exit_latency(&env, &cfg));
        }
        for &(class, size, rounds) in &cfg.teardown {
            let key = format!("teardown_{class}");
            if wanted(&key) {
                progress(&key);
                ms.push(scenarios::teardown(&env, class, size, rounds));
            }
        }
        for &(class, size, rounds) in &cfg.sweep {
            let key = format!("sweep_{class}");
            if wanted(&key) {
                progress(&key);
                ms.push(
                    scenarios::sweep(&env, class, size, rounds)
                        .unwrap_or_else(|e| failed(key, format!("{e:#}"))),
                );
            }
        }
        for &(class, size, rounds) in &cfg.registry {
            let key = format!("registry_{class}");
            if wanted(&key) {
                progress(&key);
                ms.push(scenarios::registry(&env, class, size, rounds));
            }
        }
        for &(class, size, rounds) in &cfg.ps_live {
            let key = format!("ps_{class}");
            if wanted(&key) {
                progress(&key);
                ms.push(
                    scenarios::ps_live(&env, class, size, rounds)
                        .unwrap_or_else(|e| failed(key, format!("{e:#}"))),
                );
            }
        }
        for &(class, size, rounds) in &cfg.log {
            let key = format!("log_{class}");
            if wanted(&key) {
                progress(&key);
                ms.push(
                    scenarios::log_paging(&env, class, size, rounds)
                        .unwrap_or_else(|e| failed(key, format!("{e:#}"))),
                );
            }
        }
        if wanted("footprint") {
            progress("footprint");
            ms.push(scenarios::footprint_rss(&env, &cfg));
            ms.push(scenarios::footprint_binary(&env));
            ms.push(scenarios::footprint_many(&env, &cfg));
        }

        let targets = report::targets(&ms);
        let failures: Vec<String> = ms
            .iter()
            .flat_map(|m| {
                m.failed().map(move |c| {
                    format!(
                        "{} / {}: {}",
                        m.key,
                        c.name,
                        c.reason.as_deref().unwrap_or("")
                    )
                })
            })
            .collect();
        if args.json {
            let doc = serde_json::json!({
                "mode": mode,
                "machine": machine(&env),
                "measurements": ms
                    .iter()
                    .map(|m| Ok((m.key.clone(), serde_json::to_value(m)?)))
                    .collect::<Result<serde_json::Map<String, serde_json::Value>, serde_json::Error>>()?,
                "targets": targets,
                "failures": failures,
            });
            println!("{}", serde_json::to_string_pretty(&doc)?);
        } else {
            let m = machine(&env);
            println!(
                "undertaker-bench ({mode}): {} cores, {} MiB, Linux {}, {} ({})",
                m.nproc, m.mem_total_mib, m.kernel, m.undertaker_version, m.undertaker
            );
            print!("{}", report::table(&ms, &targets));
        }
        for f in &failures {
            eprintln!("undertaker-bench: FAILED {f}");
        }
        Ok(if failures.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    }
}
