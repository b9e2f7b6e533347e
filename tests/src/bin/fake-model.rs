//! The fake model server on its own, so the HTTP examples run offline:
//! `cargo run -p awr-tests --bin fake-model -- 127.0.0.1:8089`.
//! It serves until interrupted and prints one line per request on stderr.

use std::net::SocketAddr;
use std::process::ExitCode;

use awr_tests::fake_model::FakeModel;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let arg = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8089".to_owned());
    let addr: SocketAddr = match arg.parse() {
        Ok(addr) => addr,
        Err(e) => {
            eprintln!("fake-model: `{arg}` is not an address like 127.0.0.1:8089: {e}");
            return ExitCode::from(2);
        }
    };
    if !addr.ip().is_loopback() {
        eprintln!(
            "fake-model: {addr} is not a loopback address; the fake server stays on this machine"
        );
        return ExitCode::from(2);
    }
    let server = match FakeModel::start_on(addr).await {
        Ok(server) => server,
        Err(e) => {
            eprintln!("fake-model: cannot listen on {addr}: {e}");
            return ExitCode::from(1);
        }
    };
    eprintln!("fake-model: serving {}", server.base_url());
    let mut seen = 0;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return ExitCode::SUCCESS,
            () = tokio::time::sleep(std::time::Duration::from_millis(200)) => {}
        }
        let requests = server.requests();
        for request in requests.iter().skip(seen) {
            eprintln!("fake-model: {} {}", request.method, request.path);
        }
        seen = requests.len();
    }
}
