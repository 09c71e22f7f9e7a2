//! Debian's chromium, headless, driven through chromedriver (WebDriver) by fantoccini: what
//! the site's browser test and its scale benchmark share.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};
use hyper_util::client::legacy::connect::HttpConnector;

/// A chromedriver process and one browser session on it; the driver stops when dropped.
pub struct Browser {
    pub client: Client,
    driver: Child,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// The first of `names` that runs with `--version`.
fn found(names: &[&'static str]) -> Option<&'static str> {
    names.iter().copied().find(|b| {
        Command::new(b)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// A free local port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free local port")
}

impl Browser {
    /// Headless chromium at `width`×`height`, or `None` (said why) without chromium or
    /// chromedriver (`apt-get install chromium chromium-driver`).
    pub async fn start(test: &str, width: u32, height: u32) -> Option<Browser> {
        let (Some(chromium), Some(chromedriver)) = (
            found(&["chromium", "chromium-browser", "google-chrome"]),
            found(&["chromedriver"]),
        ) else {
            kiln_contract::testing::skip(
                test,
                "no chromium or chromedriver (apt-get install chromium chromium-driver)",
            );
            return None;
        };
        let port = free_port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let chrome_path = which(chromium);
        let caps = serde_json::json!({
            "goog:chromeOptions": {
                "binary": chrome_path,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", format!("--window-size={width},{height}")],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        });
        let caps = caps.as_object().cloned().unwrap_or_default();
        let url = format!("http://127.0.0.1:{port}");
        let mut last = None;
        // chromedriver takes a moment to listen.
        for _ in 0..100 {
            match ClientBuilder::new(HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => return Some(Browser { client, driver }),
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no WebDriver session on {url}: {last:?}");
    }

    /// The browser console's messages at level SEVERE (errors) since the last call.
    pub async fn console_errors(&self) -> Vec<String> {
        let log = self
            .client
            .issue_cmd(BrowserLog)
            .await
            .expect("the browser's log");
        log.as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].to_string())
            .collect()
    }

    /// Open `url` and wait until the page's script has run (`data-ready` on the body).
    pub async fn open(&self, url: &str) {
        self.client.goto(url).await.expect("the page opens");
        self.wait_ready().await;
    }

    pub async fn wait_ready(&self) {
        for _ in 0..200 {
            let ready = self
                .client
                .execute("return document.body.getAttribute('data-ready')", vec![])
                .await
                .expect("a script runs");
            if ready == "1" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the page's script never finished");
    }
}

/// The absolute path of a program on PATH (chromedriver wants the browser's binary).
fn which(program: &str) -> String {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| program.to_string())
}

/// chromedriver's log of the browser's console (`goog:loggingPrefs`), which WebDriver itself
/// does not name.
#[derive(Debug)]
struct BrowserLog;

impl fantoccini::wd::WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type":"browser"}"#.into()))
    }
}
