//! `fake-github [--port N] [--seed-demo]`: runs the fake GitHub until SIGINT/SIGTERM, for demos
//! and manual testing. With `--seed-demo` it creates user `octo`, repo `octo/hello` (installed)
//! and org `acme` (repos `acme/api`, `acme/web`, installed for all repos, `octo` an admin).

use anyhow::{bail, Context};
use rm_testkit::{FakeConfig, FakeGitHub, InstallationRepos};

fn parse_args() -> anyhow::Result<(u16, bool)> {
    let mut port = 0u16;
    let mut seed = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--port" => {
                let v = args
                    .next()
                    .context("--port needs a value, e.g. --port 8787")?;
                port = v
                    .parse()
                    .with_context(|| format!("--port {v:?} is not a port number"))?;
            }
            "--seed-demo" => seed = true,
            "-h" | "--help" => {
                println!("usage: fake-github [--port N] [--seed-demo]");
                std::process::exit(0);
            }
            other => {
                bail!("unknown argument {other:?}; usage: fake-github [--port N] [--seed-demo]")
            }
        }
    }
    Ok((port, seed))
}

fn seed(gh: &FakeGitHub) -> anyhow::Result<()> {
    gh.create_user("octo")?;
    gh.create_repo("octo/hello")?;
    gh.create_installation(
        "octo",
        InstallationRepos::Selected(vec!["octo/hello".into()]),
    )?;
    gh.create_org("acme")?;
    gh.add_org_member("acme", "octo", true)?;
    gh.create_repo("acme/api")?;
    gh.create_repo("acme/web")?;
    gh.create_installation("acme", InstallationRepos::All)?;
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("installing the SIGTERM handler")?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C")?,
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let (port, seed_demo) = parse_args()?;
    let gh = FakeGitHub::start(FakeConfig {
        port,
        ..FakeConfig::default()
    })
    .await?;
    if seed_demo {
        seed(&gh)?;
        // The demo's runners: the fake runner package, built from the fake listener that
        // `cargo build --workspace --bins` put next to this binary.
        match rm_testkit::package::RunnerPackage::shared_for_tests() {
            Ok(package) => gh.set_runner_package(&package),
            Err(e) => eprintln!(
                "no runner package served ({e}): build it with `cargo build --workspace --bins`"
            ),
        }
    }
    let o = gh.origin();
    println!("fake GitHub listening");
    println!("  REST base (github.com style): {o}");
    println!("  REST base (GHES style):       {}", gh.api_v3());
    println!("  OAuth client id:              {}", gh.client_id());
    println!("  device flow:                  POST {o}/login/device/code, POST {o}/login/oauth/access_token");
    println!("  approve a code in a browser:  {o}/login/device");
    println!(
        "  control API:                  {} (see service/testkit/README.md)",
        gh.control_url()
    );
    if seed_demo {
        println!("  seeded: user octo, repo octo/hello (installed), org acme (acme/api, acme/web; octo is admin)");
        println!(
            "  issue a token with: curl -s -X POST {o}/_fake/tokens -d '{{\"login\":\"octo\"}}'"
        );
        println!(
            "  queue a job with:   curl -s -X POST {o}/_fake/runs -d '{{\"repo\":\"octo/hello\",\"jobs\":[{{\"name\":\"build\",\"labels\":[\"self-hosted\"],\"behaviour\":\"succeed\",\"duration_ms\":2000}}]}}'"
        );
    }
    wait_for_signal().await?;
    println!("fake GitHub stopping");
    gh.shutdown();
    Ok(())
}
