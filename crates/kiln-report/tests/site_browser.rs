//! The results site in a real browser: the site built from every committed run (the H200's
//! included), opened from files in headless chromium; a filter applied (and restored from the
//! URL), a column sorted, a compare view and a machine page opened; the visible rows checked
//! against the data and the console checked for errors. `KILN_SITE_SHOTS=DIR` also saves the
//! screenshots docs/site.md shows.

mod browser;

use std::path::{Path, PathBuf};

use fantoccini::Locator;
use serde_json::Value;

use browser::Browser;
use kiln_report::site;

fn committed_site(out: &Path) -> Value {
    let results =
        kiln_contract::testing::package_dir(env!("CARGO_MANIFEST_DIR")).join("../../docs/results");
    let (dirs, _) = site::run_dirs(std::slice::from_ref(&results)).unwrap();
    let runs = site::read_runs(&dirs).unwrap();
    let (inference, _) =
        site::runs::dirs_holding(&[results], kiln_report::infer::INFER_FILE).unwrap();
    let serving = site::serving::read_serving(&inference).unwrap();
    site::build(&runs, &serving, out).unwrap();
    serde_json::from_str(&std::fs::read_to_string(out.join("data.json")).unwrap()).unwrap()
}

fn url(out: &Path, page: &str) -> String {
    format!("file://{}/{page}", out.display())
}

/// The text of every cell of the table `#id`'s visible rows, column `col`.
async fn column(b: &Browser, id: &str, col: usize) -> Vec<String> {
    let script = format!(
        "return Array.from(document.querySelectorAll('#{id} tbody tr'))\
         .map(function (tr) {{ return tr.cells[{col}].textContent; }})"
    );
    let v = b.client.execute(&script, vec![]).await.unwrap();
    serde_json::from_value(v).unwrap()
}

async fn choose(b: &Browser, select: &str, value: &str) {
    let css = format!("select[name='{select}'] option[value='{value}']");
    b.client
        .find(Locator::Css(&css))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

async fn shot(b: &Browser, name: &str) {
    if let Some(dir) = std::env::var_os("KILN_SITE_SHOTS") {
        let png = b.client.screenshot().await.unwrap();
        std::fs::write(PathBuf::from(dir).join(name), png).unwrap();
    }
}

async fn index_filters_and_sorts(b: &Browser, out: &Path, data: &Value) {
    let rows = data["rows"].as_array().unwrap();
    let machines = data["machines"].as_array().unwrap();
    b.open(&url(out, "index.html")).await;
    // By default the index shows release Burns' rows only (a checkout's are a developer's A/B).
    let release = |r: &&Value| r["release"] != false;
    let released = rows.iter().filter(release).count();
    assert!(
        released < rows.len(),
        "the committed runs hold checkout rows"
    );
    let drawn = released.min(site::pages::ROWS_DRAWN);
    assert_eq!(column(b, "results", 1).await.len(), drawn);
    let count = b
        .client
        .find(Locator::Id("shown"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(count, format!("{released} of {} rows", rows.len()));
    choose(b, "burn", "all").await;
    // Filter by the H200: exactly its rows remain, and the URL says so.
    let gpu = "NVIDIA H200";
    choose(b, "gpu", gpu).await;
    let on_gpu = |r: &&Value| machines[r["machine"].as_u64().unwrap() as usize]["gpu"] == gpu;
    let expected = rows.iter().filter(on_gpu).count();
    assert!(expected >= 10, "{expected} H200 rows");
    let shown = column(b, "results", 0).await;
    assert_eq!(shown.len(), expected);
    assert!(shown.iter().all(|m| m.contains(gpu)), "{shown:?}");
    let linked = b.client.current_url().await.unwrap();
    assert!(
        linked.fragment().unwrap_or("").contains("gpu=NVIDIA"),
        "{linked}"
    );
    // Sorted by epoch time, slowest first: a click on the header, twice.
    for _ in 0..2 {
        b.client
            .find(Locator::Css("th[data-col='epoch']"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
    }
    let epochs: Vec<f64> = {
        let v = b
            .client
            .execute(
                "return Array.from(document.querySelectorAll('#results tbody tr td.epoch'))\
             .map(function (td) { return td.textContent; })",
                vec![],
            )
            .await
            .unwrap();
        let texts: Vec<String> = serde_json::from_value(v).unwrap();
        let mut by_text: Vec<f64> = Vec::new();
        for t in texts {
            if let Some(r) = rows
                .iter()
                .filter(on_gpu)
                .find(|r| r["epoch_text"] == t.as_str())
            {
                by_text.extend(r["epoch"].as_f64());
            }
        }
        by_text
    };
    assert!(
        epochs.len() >= 5 && epochs.windows(2).all(|w| w[0] >= w[1]),
        "{epochs:?}"
    );
    shot(b, "site-index.png").await;
    // The linked view opens as it was left.
    b.open(linked.as_str()).await;
    assert_eq!(column(b, "results", 0).await.len(), expected);
    let value = b
        .client
        .execute(
            "return document.querySelector(\"select[name='gpu']\").value",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(value, gpu);
}

/// The A/B run's two Burns on one machine: every cell both measured, with B over A.
async fn compare_two_burns(b: &Browser, out: &Path, data: &Value) {
    let rows = data["rows"].as_array().unwrap();
    let ab = |side: &str| {
        rows.iter()
            .find(|r| {
                r["run"]
                    .as_str()
                    .is_some_and(|n| n.contains("burn-ab/") && n.contains(side))
            })
            .map(|r| {
                let m = &data["machines"][r["machine"].as_u64().unwrap() as usize];
                format!(
                    "{}@{}",
                    m["id"].as_str().unwrap(),
                    r["burn"].as_str().unwrap()
                )
            })
            .unwrap()
    };
    let (a, bb) = (ab("/a-"), ab("/b-"));
    let query = format!("a={}&b={}", enc(&a), enc(&bb));
    b.open(&format!("{}#{query}", url(out, "compare.html")))
        .await;
    let ratios = column(b, "compare", 7).await;
    let timed: Vec<&String> = ratios.iter().filter(|r| r.ends_with('×')).collect();
    assert!(!timed.is_empty(), "{ratios:?}");
    let side_b = b
        .client
        .execute(
            "return document.querySelector(\"select[name='b']\").value",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(side_b, bb.as_str());
    shot(b, "site-compare.png").await;
}

fn enc(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// From the index to the H200's page: its fingerprint, its runs, a chart.
async fn machine_page(b: &Browser, out: &Path) {
    b.open(&format!("{}#gpu=NVIDIA+H200", url(out, "index.html")))
        .await;
    b.client
        .find(Locator::Css("#results tbody tr td a"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let h1 = b
        .client
        .find(Locator::Css("h1"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(h1.contains("family 6 model 207"), "{h1}");
    let fingerprint = b
        .client
        .find(Locator::Css("ul.fingerprint"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(fingerprint.contains("H200"), "{fingerprint}");
    let runs = b.client.find_all(Locator::Css("section h3")).await.unwrap();
    assert!(runs.len() >= 4, "{} runs", runs.len());
    assert!(
        !b.client
            .find_all(Locator::Css("figure.chart svg"))
            .await
            .unwrap()
            .is_empty()
    );
}

/// The serving page, reached from the index's menu: its rows filtered by backend and sorted by
/// p50, then the inference runs' own tables and charts; the compare view's serving table.
async fn serving_page(b: &Browser, out: &Path, data: &Value) {
    b.open(&url(out, "index.html")).await;
    b.client
        .find(Locator::LinkText("Serving"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let h1 = b.client.find(Locator::Css("h1")).await.unwrap();
    assert_eq!(h1.text().await.unwrap(), "Serving");
    let all = data["serving_rows"].as_array().unwrap();
    assert_eq!(column(b, "serving", 1).await.len(), all.len());
    choose(b, "backend", "flex").await;
    let backends = column(b, "serving", 2).await;
    let flex = all.iter().filter(|r| r["backend"] == "flex").count();
    assert!(flex >= 2 && backends.len() == flex, "{backends:?}");
    assert!(backends.iter().all(|x| x == "flex"), "{backends:?}");
    b.client
        .find(Locator::Css("th[data-col='p50']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let p50: Vec<f64> = column(b, "serving", 6)
        .await
        .iter()
        .filter_map(|text| {
            let row = all.iter().find(|r| r["texts"][0] == text.as_str())?;
            row["values"]["p50"].as_f64()
        })
        .collect();
    assert!(
        p50.len() == flex && p50.windows(2).all(|w| w[0] <= w[1]),
        "{p50:?}"
    );
    let linked = b.client.current_url().await.unwrap();
    assert!(
        linked.fragment().unwrap_or("").contains("backend=flex"),
        "{linked}"
    );
    shot(b, "site-serving.png").await;
    let rows = b
        .client
        .find_all(Locator::Css("section table tr"))
        .await
        .unwrap();
    assert!(rows.len() >= 4, "{} rows", rows.len());
    let charts = b
        .client
        .find_all(Locator::Css("section svg"))
        .await
        .unwrap();
    assert!(!charts.is_empty());
    // The compare view's default sides include the EPYC's Burn, whose inference rows it shows.
    let epyc = all
        .iter()
        .find(|r| r["backend"] == "flex")
        .map(|r| &data["machines"][r["machine"].as_u64().unwrap() as usize])
        .unwrap();
    let side = format!("{}@0.22.1", epyc["id"].as_str().unwrap());
    b.open(&format!(
        "{}#a={}&b={}",
        url(out, "compare.html"),
        enc(&side),
        enc(&side)
    ))
    .await;
    let ratios = column(b, "compare-serving", 6).await;
    assert!(
        ratios.iter().any(|r| r == "1.00×"),
        "the same side against itself: {ratios:?}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn the_site_filters_compares_and_links_in_chromium_without_console_errors() {
    let Some(b) = Browser::start("the results site in chromium", 1500, 1000).await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let data = committed_site(tmp.path());
    index_filters_and_sorts(&b, tmp.path(), &data).await;
    compare_two_burns(&b, tmp.path(), &data).await;
    machine_page(&b, tmp.path()).await;
    serving_page(&b, tmp.path(), &data).await;
    let errors = b.console_errors().await;
    let _ = b.client.clone().close().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
}

/// The console check sees a script's error: a page that calls what does not exist.
#[tokio::test(flavor = "current_thread")]
async fn a_script_error_reaches_the_console_check() {
    let Some(b) = Browser::start("the console check in chromium", 800, 600).await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let page = tmp.path().join("broken.html");
    std::fs::write(
        &page,
        "<!DOCTYPE html><title>x</title><script>notDefined();</script>",
    )
    .unwrap();
    b.client
        .goto(&url(tmp.path(), "broken.html"))
        .await
        .unwrap();
    let errors = b.console_errors().await;
    let _ = b.client.clone().close().await;
    assert!(
        errors.iter().any(|e| e.contains("notDefined")),
        "{errors:?}"
    );
}
