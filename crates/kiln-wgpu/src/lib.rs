//! Kiln's binding of Burn's `wgpu` backend: every adapter of every graphics API the build can
//! reach (Vulkan, Metal, DX12, WebGPU), probed without panicking, CPU-emulated adapters labelled.
//!
//! Device specs are `API:KIND[:INDEX]`, for example `vulkan:discrete:0`, `metal:integrated:0` or
//! `vulkan:cpu` (Mesa's lavapipe). Indices count adapters of one kind on one API from zero, the
//! way Burn's `DeviceKind` does.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Mutex, OnceLock};

use burn::tensor::wgpu::{WgpuBackend, wgpu};
use burn::tensor::{Device, DeviceKind};
use kiln_contract::{DeviceKind as Kind, DeviceReport, Runtime};
use kiln_core::Binding;
use kiln_core::device::{Selected, supported_precisions};

/// The wgpu backend: one device per adapter and graphics API.
pub struct WgpuBinding;

/// Graphics APIs Kiln asks for adapters, in the order it prefers them.
const APIS: &[(&str, wgpu::Backend, WgpuBackend)] = &[
    ("vulkan", wgpu::Backend::Vulkan, WgpuBackend::Vulkan),
    ("metal", wgpu::Backend::Metal, WgpuBackend::Metal),
    ("dx12", wgpu::Backend::Dx12, WgpuBackend::Dx12),
    ("webgpu", wgpu::Backend::BrowserWebGpu, WgpuBackend::WebGpu),
];

/// API names `--api` accepts.
pub const API_NAMES: &[&str] = &["vulkan", "metal", "dx12", "webgpu"];

/// One adapter as the graphics API reports it.
#[derive(Debug, Clone)]
pub struct Adapter {
    pub api: &'static str,
    pub name: String,
    pub kind: &'static str,
    /// Index among adapters of the same kind on the same API.
    pub index: usize,
    pub driver: String,
    pub cpu_emulated: bool,
}

impl Adapter {
    /// What `--device` takes to select this adapter.
    pub fn spec(&self) -> String {
        match self.kind {
            "cpu" => format!("{}:cpu", self.api),
            kind => format!("{}:{kind}:{}", self.api, self.index),
        }
    }

    /// Kiln's device kind: a CPU adapter is a software GPU on the CPU, never a GPU.
    pub fn device_kind(&self) -> Kind {
        if self.cpu_emulated {
            Kind::CpuEmulatedGpu
        } else {
            match self.kind {
                "discrete" => Kind::DiscreteGpu,
                "integrated" => Kind::IntegratedGpu,
                "virtual" => Kind::VirtualGpu,
                _ => Kind::OtherGpu,
            }
        }
    }

    fn runtime(&self) -> Runtime {
        kiln_core::cubecl::runtime(
            self.api,
            &self.driver,
            self.cpu_emulated,
            kiln_core::cubecl::fused::<burn::backend::Wgpu>(),
        )
    }

    /// Preference when Kiln picks one adapter: real GPUs first, discrete before integrated.
    fn rank(&self) -> u8 {
        match (self.cpu_emulated, self.kind) {
            (false, "discrete") => 0,
            (false, "integrated") => 1,
            (false, "virtual") => 2,
            (false, _) => 3,
            (true, _) => 4,
        }
    }
}

/// Software Vulkan/DX12 implementations that run on the CPU, recognised by name or driver.
fn is_cpu_emulated(info: &wgpu::AdapterInfo) -> bool {
    let text = format!("{} {} {}", info.name, info.driver, info.driver_info).to_lowercase();
    info.device_type == wgpu::DeviceType::Cpu
        || [
            "llvmpipe",
            "lavapipe",
            "swiftshader",
            "microsoft basic render",
            "warp",
        ]
        .iter()
        .any(|n| text.contains(n))
}

/// Drive a future that the native wgpu API completes without waiting on anything.
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

/// Every adapter of every API this build of wgpu can reach (none on a machine without drivers).
pub fn adapters() -> Vec<Adapter> {
    let mut found = Vec::new();
    for &(api, backend, _) in APIS {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: backend.into(),
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        let mut next: HashMap<&str, usize> = HashMap::new();
        for adapter in block_on(instance.enumerate_adapters(backend.into())) {
            let info = adapter.get_info();
            let kind = match info.device_type {
                wgpu::DeviceType::DiscreteGpu => "discrete",
                wgpu::DeviceType::IntegratedGpu => "integrated",
                wgpu::DeviceType::VirtualGpu => "virtual",
                wgpu::DeviceType::Cpu => "cpu",
                wgpu::DeviceType::Other => "other",
            };
            let counter = next.entry(kind).or_insert(0);
            let index = *counter;
            *counter += 1;
            let driver = [info.driver.as_str(), info.driver_info.as_str()]
                .iter()
                .filter(|s| !s.is_empty())
                .copied()
                .collect::<Vec<_>>()
                .join(" ");
            found.push(Adapter {
                api,
                name: info.name.clone(),
                kind,
                index,
                driver,
                cpu_emulated: is_cpu_emulated(&info),
            });
        }
    }
    found
}

/// The adapter Kiln uses by default: the best-ranked, in API order.
pub fn best(adapters: &[Adapter]) -> Option<&Adapter> {
    adapters.iter().min_by_key(|a| a.rank())
}

/// Parse `API:KIND[:INDEX]` into Burn's selector.
fn parse_spec(spec: &str) -> Result<(&'static str, WgpuBackend, DeviceKind), String> {
    let mut parts = spec.split(':');
    let api = parts.next().unwrap_or_default();
    let &(api, _, backend) = APIS.iter().find(|(n, _, _)| *n == api).ok_or_else(|| {
        format!(
            "{spec:?}: unknown graphics API {api:?}; use one of {} (for example vulkan:discrete:0)",
            API_NAMES.join(", ")
        )
    })?;
    let kind = parts.next().unwrap_or("default");
    let index = match parts.next() {
        Some(i) => i
            .parse::<usize>()
            .map_err(|_| format!("{spec:?}: adapter index {i:?} is not a number"))?,
        None => 0,
    };
    let kind = match kind {
        "discrete" => DeviceKind::DiscreteGpu(index),
        "integrated" => DeviceKind::IntegratedGpu(index),
        "virtual" => DeviceKind::VirtualGpu(index),
        "cpu" => DeviceKind::Cpu,
        "default" => DeviceKind::DefaultDevice,
        other => {
            return Err(format!(
                "{spec:?}: unknown adapter kind {other:?}; use discrete, integrated, virtual, cpu or default"
            ));
        }
    };
    Ok((api, backend, kind))
}

/// Devices initialised in this process: Burn initialises a wgpu runtime once per adapter.
fn initialised() -> &'static Mutex<HashMap<String, Device>> {
    static DEVICES: OnceLock<Mutex<HashMap<String, Device>>> = OnceLock::new();
    DEVICES.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Initialise (once) the device of `adapter`, or say why it cannot be.
fn open(adapter: &Adapter) -> Result<Device, String> {
    let spec = adapter.spec();
    let mut devices = initialised().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(d) = devices.get(&spec) {
        return Ok(d.clone());
    }
    let (_, backend, kind) = parse_spec(&spec)?;
    let device = Device::wgpu_options()
        .device_kind(kind)
        .graphics_api(backend)
        .init()
        .map_err(|e| format!("{} could not be opened: {e}", adapter.name))?;
    devices.insert(spec, device.clone());
    Ok(device)
}

/// Why there is no usable adapter, with what to install.
fn no_adapter_reason() -> String {
    let hint = if cfg!(target_os = "linux") {
        "install the GPU's Vulkan driver, or Mesa's CPU driver for a correctness run \
         (Debian/Ubuntu: apt-get install mesa-vulkan-drivers libvulkan1)"
    } else if cfg!(target_os = "macos") {
        "Metal needs macOS 10.13+ on a Mac with a Metal GPU"
    } else if cfg!(target_os = "windows") {
        "update the GPU driver (DX12 or Vulkan)"
    } else {
        "this platform offers no wgpu graphics API"
    };
    format!("no Vulkan, Metal, DX12 or WebGPU adapter found: {hint}")
}

impl Binding for WgpuBinding {
    fn name(&self) -> &'static str {
        "wgpu"
    }

    fn version(&self) -> &'static str {
        kiln_core::BURN_VERSION
    }

    fn probe(&self) -> Vec<DeviceReport> {
        let adapters = adapters();
        let best_spec = best(&adapters).map(Adapter::spec);
        if adapters.is_empty() {
            return vec![DeviceReport {
                spec: "none".into(),
                name: "no adapter".into(),
                kind: Kind::OtherGpu,
                available: false,
                reason: Some(no_adapter_reason()),
                precisions: Vec::new(),
                default: false,
                memory_bytes: None,
                runtime: None,
            }];
        }
        adapters
            .iter()
            .map(|a| {
                let opened = open(a);
                let mut reason = opened.as_ref().err().cloned();
                if a.cpu_emulated && reason.is_none() {
                    reason = Some(
                        "CPU-emulated adapter (software Vulkan on the CPU): a correctness row, \
                         not a GPU result"
                            .into(),
                    );
                }
                DeviceReport {
                    spec: a.spec(),
                    name: a.name.clone(),
                    kind: a.device_kind(),
                    available: opened.is_ok(),
                    reason,
                    precisions: opened
                        .as_ref()
                        .map(supported_precisions)
                        .unwrap_or_default(),
                    default: best_spec.as_deref() == Some(a.spec().as_str()),
                    memory_bytes: None,
                    runtime: Some(a.runtime()),
                }
            })
            .collect()
    }

    fn device(&self, spec: &str) -> Result<Selected, String> {
        let adapters = adapters();
        let adapter = if spec == "default" {
            best(&adapters).ok_or_else(no_adapter_reason)?
        } else {
            let (api, _, kind) = parse_spec(spec)?;
            let wanted = |a: &&Adapter| {
                a.api == api
                    && match kind {
                        DeviceKind::DiscreteGpu(i) => a.kind == "discrete" && a.index == i,
                        DeviceKind::IntegratedGpu(i) => a.kind == "integrated" && a.index == i,
                        DeviceKind::VirtualGpu(i) => a.kind == "virtual" && a.index == i,
                        DeviceKind::Cpu => a.kind == "cpu",
                        _ => true,
                    }
            };
            let on_api: Vec<&Adapter> = adapters.iter().filter(|a| a.api == api).collect();
            match kind {
                DeviceKind::DefaultDevice => on_api.into_iter().min_by_key(|a| a.rank()),
                _ => adapters.iter().find(wanted),
            }
            .ok_or_else(|| {
                let listed: Vec<String> = adapters.iter().map(Adapter::spec).collect();
                if listed.is_empty() {
                    no_adapter_reason()
                } else {
                    format!(
                        "no adapter {spec:?} on this machine; adapters: {}",
                        listed.join(", ")
                    )
                }
            })?
        };
        let device = open(adapter)?;
        Ok(Selected {
            device,
            spec: adapter.spec(),
            name: adapter.name.clone(),
            kind: adapter.device_kind(),
            runtime: Some(adapter.runtime()),
            remote: None,
        })
    }

    fn threads(&self) -> usize {
        // The host threads that feed the device; the work itself runs on the adapter.
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record's `fusion` is read from Burn's backend type: Kiln's Burn (default features)
    /// fuses, and the type still says so by name.
    #[test]
    fn burns_default_build_reads_as_fused() {
        assert!(kiln_core::cubecl::fused::<burn::backend::Wgpu>());
        assert!(!kiln_core::cubecl::fused::<burn::backend::Flex>());
    }

    #[test]
    fn specs_parse_and_reject_clearly() {
        assert!(matches!(
            parse_spec("vulkan:discrete:1"),
            Ok(("vulkan", WgpuBackend::Vulkan, DeviceKind::DiscreteGpu(1)))
        ));
        assert!(matches!(
            parse_spec("metal"),
            Ok(("metal", WgpuBackend::Metal, DeviceKind::DefaultDevice))
        ));
        let e = parse_spec("opengl:cpu").unwrap_err();
        assert!(
            e.contains("unknown graphics API") && e.contains("vulkan"),
            "{e}"
        );
        let e = parse_spec("vulkan:gpu").unwrap_err();
        assert!(e.contains("unknown adapter kind"), "{e}");
        let e = parse_spec("vulkan:discrete:x").unwrap_err();
        assert!(e.contains("not a number"), "{e}");
    }

    #[test]
    fn cpu_adapters_rank_last_and_are_labelled() {
        let a = |kind: &'static str, emu: bool| Adapter {
            api: "vulkan",
            name: "x".into(),
            kind,
            index: 0,
            driver: String::new(),
            cpu_emulated: emu,
        };
        let list = vec![a("cpu", true), a("integrated", false), a("discrete", false)];
        assert_eq!(best(&list).map(|a| a.kind), Some("discrete"));
        assert_eq!(list[0].device_kind(), Kind::CpuEmulatedGpu);
        assert_eq!(list[0].spec(), "vulkan:cpu");
        assert_eq!(list[2].spec(), "vulkan:discrete:0");
    }
}
