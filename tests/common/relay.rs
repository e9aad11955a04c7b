//! A TCP relay between the ledger and Redis that can lose a reply on
//! purpose, for the test of a charge whose answer never came back.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// A TCP relay in front of a server that can lose a reply on purpose: after
/// [`LossyRelay::lose_next_reply`], the next bytes the server sends are
/// dropped and the client's connection is closed, as when a network fails
/// after the server has acted on a request but before the client heard back.
pub struct LossyRelay {
    pub port: u16,
    lose: Arc<AtomicBool>,
    lost: Arc<AtomicUsize>,
}

impl LossyRelay {
    pub fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        let port = listener.local_addr().unwrap().port();
        let lose = Arc::new(AtomicBool::new(false));
        let lost = Arc::new(AtomicUsize::new(0));
        let (l, n) = (lose.clone(), lost.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c_in, &mut s_out);
                    let _ = s_out.shutdown(std::net::Shutdown::Write);
                });
                let (l, n) = (l.clone(), n.clone());
                std::thread::spawn(move || {
                    let (mut from, mut to) = (server, client);
                    let mut buf = [0u8; 65536];
                    while let Ok(k @ 1..) = std::io::Read::read(&mut from, &mut buf) {
                        if l.swap(false, Ordering::SeqCst) {
                            n.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                        if to.write_all(&buf[..k]).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(std::net::Shutdown::Both);
                    let _ = from.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        Self { port, lose, lost }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Lose the next reply (and close that connection).
    pub fn lose_next_reply(&self) {
        self.lose.store(true, Ordering::SeqCst);
    }

    /// How many replies were lost.
    pub fn lost(&self) -> usize {
        self.lost.load(Ordering::SeqCst)
    }
}
