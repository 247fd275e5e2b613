//! runner-manager-tray: the tray icon, its menu and the notifications of runner-manager. It
//! stays resident, so it links no web engine: the dashboard and the sign-in window are a
//! second process, `runner-manager-window`, started when one is asked for ([`windows`]). A
//! client of the service's local API only (`rm-proto`): it never holds a GitHub token or a
//! device code (sign-in runs in the service), and it works whether or not the service runs
//! (it says so, and reconnects by itself).
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

mod actions;
mod app;
mod args;
mod first_run;
mod follow;
mod host;
mod instance;
mod notify;
mod relaunch;
mod tray;
mod windows;

use std::process::ExitCode;

use app::{App, UserEvent};
use args::Args;
use rm_proto::model::ModelOptions;
use rm_tray::link::Window;
use rm_tray::state::Shared;
use tao::event::{Event, StartCause};
use tao::event_loop::{ControlFlow, EventLoopBuilder};

fn main() -> ExitCode {
    rm_tray::no_gl();
    rm_tray::init_logging();
    // A tray restarted after its binary was replaced starts once the previous one is gone.
    relaunch::wait_for_predecessor();
    // Which file this tray runs from, before anything can replace it.
    let exe = relaunch::Exe::at_start();
    let args = match args::parse(std::env::args_os()) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{}", args::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    let show = args.show.unwrap_or(Window::Dashboard);
    // A second launch hands over to the running tray (which shows the window) and exits.
    let instance = match instance::claim(show) {
        Ok(instance::Claim::Ours(guard)) => Some(guard),
        Ok(instance::Claim::HandedOver) => {
            tracing::info!("the tray already runs: it shows the {}", show.label());
            return ExitCode::SUCCESS;
        }
        Err(why) => {
            tracing::warn!(%why, "no single-instance guard; starting anyway");
            None
        }
    };
    match run(args, exe, instance) {
        Ok(never) => match never {},
        Err(e) => {
            eprintln!("error: the tray could not start: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(
    args: Args,
    exe: Option<relaunch::Exe>,
    instance: Option<instance::Guard>,
) -> anyhow::Result<std::convert::Infallible> {
    use anyhow::Context;
    let sockets = match &args.socket {
        Some(s) => vec![s.clone()],
        None => rm_proto::sockets::default_sockets(),
    };
    let options = ModelOptions {
        notify_finished_jobs: args.notify_finished_jobs,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("tray-io")
        .enable_all()
        .build()
        .context("starting the tray's I/O thread")?;
    let event_loop = EventLoopBuilder::<UserEvent>::with_user_event().build();
    let app = App::new(
        Shared::new(sockets, options),
        event_loop.create_proxy(),
        runtime.handle().clone(),
        exe,
        args.socket.clone(),
    );
    if let Some(guard) = &instance {
        guard.serve(app.clone());
    }
    {
        let app = app.clone();
        tray_icon::menu::MenuEvent::set_event_handler(Some(
            move |event: tray_icon::menu::MenuEvent| app.send(UserEvent::Menu(event.id.0)),
        ));
    }
    let show = args.show;
    let mut icon: Option<tray::Icon> = None;
    event_loop.run(move |event, _target, control_flow| {
        // Kept alive as long as the loop runs.
        let _ = (&runtime, &instance);
        *control_flow = ControlFlow::Wait;
        match event {
            Event::NewEvents(StartCause::Init) => {
                start(&app, &mut icon, show);
            }
            Event::UserEvent(UserEvent::Render) => {
                if let Some(icon) = icon.as_mut() {
                    icon.render(&app);
                }
            }
            Event::UserEvent(UserEvent::Menu(id)) => actions::menu(&app, &id),
            Event::UserEvent(UserEvent::Exit) => {
                tracing::info!("the tray ends; the service keeps serving jobs");
                // The icon goes at once; the process a moment later, so the answer to the
                // tray host's click (Quit) still reaches it.
                icon = None;
                let app = app.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(std::time::Duration::from_millis(300));
                    app.send(UserEvent::ExitNow);
                });
            }
            Event::UserEvent(UserEvent::ExitNow) => {
                *control_flow = ControlFlow::ExitWithCode(0);
            }
            _ => {}
        }
    })
}

/// At the loop's start (GTK is up): the icon, or the dashboard when no tray host exists; then
/// the follower and any window asked for.
fn start(app: &App, icon: &mut Option<tray::Icon>, show: Option<Window>) {
    match host::missing_tray_host() {
        None => match tray::Icon::create() {
            Ok(created) => {
                *icon = Some(created);
                tracing::info!("tray icon registered");
            }
            Err(error) => {
                let why = format!(
                    "The tray icon could not be created ({error}), so runner-manager runs in \
                     this window; closing it quits the tray app (the service keeps serving jobs)."
                );
                tracing::warn!(%why, "no tray icon: opening the dashboard instead");
                app.shared.set_no_tray(Some(why));
                windows::open(app, Window::Dashboard, None);
            }
        },
        Some(why) => {
            tracing::warn!(%why, "no tray host: opening the dashboard instead");
            app.shared.set_no_tray(Some(why));
            windows::open(app, Window::Dashboard, None);
        }
    }
    follow::spawn(app.clone());
    if let Some(window) = show {
        windows::open(app, window, None);
    }
}
