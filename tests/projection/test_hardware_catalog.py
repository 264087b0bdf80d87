"""The hardware catalog: every sweep-format id loads, with sources, sane peaks and fabrics."""

from __future__ import annotations

from importlib import resources

import pytest

from projection.errors import UnknownNameError
from projection.hardware import HardwareSpec, PrecisionNotSupported, list_hardware, load_hardware
from source_tree import fresh_python_stdout

# The hardware ids of shared/specs/sweep-format.md ("Hardware ids").
SWEEP_FORMAT_IDS = [
    "a100-40gb", "a100-80gb", "h100-sxm", "h100-96gb-500w", "h200", "h800",
    "b200", "b300", "gb200", "gb300", "mi300x", "mi325x", "mi350x", "mi355x",
]
FOUR_BIT_GEMM_PRECISION = "nvfp4"


def test_catalog_holds_exactly_the_sweep_format_ids() -> None:
    folder = resources.files("projection") / "catalog" / "hardware"
    stems = sorted(item.name.removesuffix(".yaml") for item in folder.iterdir() if item.name.endswith(".yaml"))
    assert stems == sorted(SWEEP_FORMAT_IDS)
    assert [spec.id for spec in list_hardware()] == sorted(SWEEP_FORMAT_IDS)


@pytest.mark.parametrize("hardware_id", SWEEP_FORMAT_IDS)
def test_every_sweep_format_id_loads(hardware_id: str) -> None:
    spec = load_hardware(hardware_id)
    assert isinstance(spec, HardwareSpec)
    assert spec.id == hardware_id
    assert load_hardware(hardware_id.upper()) is spec
    assert {s.id: s for s in list_hardware()}[hardware_id] is spec     # one id, one object, whichever way read


def test_an_id_reads_its_own_file_alone() -> None:
    code = ("from projection import hardware; assert hardware.load_hardware('MI355X').id == 'mi355x'; "
            "print(hardware._catalog.cache_info().currsize, hardware._spec_in_file.cache_info().currsize)")
    assert fresh_python_stdout(code).split() == ["0", "1"]     # no full catalog read, one file


@pytest.mark.parametrize(
    ("name", "hardware_id"),
    [
        ("H100", "h100-sxm"),
        ("H100 SXM", "h100-sxm"),
        ("h100_sxm", "h100-sxm"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("GB200 NVL72", "gb200"),
        ("AMD Instinct MI300X", "mi300x"),
        ("dgx-b200", "b200"),
    ],
)
def test_common_spellings_resolve(name: str, hardware_id: str) -> None:
    assert load_hardware(name).id == hardware_id


def test_every_alias_resolves_to_its_own_entry() -> None:
    for spec in list_hardware():
        for alias in spec.aliases:
            assert load_hardware(alias).id == spec.id, alias


def test_unknown_name_suggests_the_nearest() -> None:
    with pytest.raises(UnknownNameError, match="did you mean.*mi300x") as info:
        load_hardware("mi300")
    assert info.value.kind == "hardware"
    assert "h100-sxm" in info.value.choices


@pytest.mark.parametrize("spec", list_hardware(), ids=lambda spec: spec.id)
def test_every_entry_cites_a_url(spec: HardwareSpec) -> None:
    assert any(source.startswith("https://") for source in spec.sources)


@pytest.mark.parametrize("spec", list_hardware(), ids=lambda spec: spec.id)
def test_peaks_grow_as_precision_narrows(spec: HardwareSpec) -> None:
    peaks = spec.peak_flops_per_s
    ladder = [peaks[dtype] for dtype in ("tf32", "bf16", "fp8", "fp4") if dtype in peaks]
    assert ladder == sorted(ladder)
    assert len(set(ladder)) == len(ladder)
    assert peaks["bf16"] == peaks["fp16"]


@pytest.mark.parametrize("spec", list_hardware(), ids=lambda spec: spec.id)
def test_supported_precisions_have_a_peak(spec: HardwareSpec) -> None:
    for precision in spec.supported_precisions:
        assert spec.peak_flops_for(precision) > 0


def test_block_scaled_recipes_run_at_the_fp8_rate() -> None:
    spec = load_hardware("b200")
    fp8_flops_per_s = spec.peak_flops_for("fp8")
    assert spec.peak_flops_for("fp8-blockwise") == fp8_flops_per_s
    assert spec.peak_flops_for("mxfp8") == fp8_flops_per_s
    assert spec.peak_flops_for(FOUR_BIT_GEMM_PRECISION) == spec.peak_flops_per_s["fp4"]


@pytest.mark.parametrize("hardware_id", ["a100-40gb", "a100-80gb"])
@pytest.mark.parametrize("precision", ["fp8", "fp8-blockwise", "mxfp8", "nvfp4"])
def test_ampere_has_no_fp8(hardware_id: str, precision: str) -> None:
    with pytest.raises(PrecisionNotSupported, match=hardware_id):
        load_hardware(hardware_id).peak_flops_for(precision)


def test_precision_errors_are_value_errors() -> None:
    with pytest.raises(ValueError, match="int8"):
        load_hardware("h100-sxm").peak_flops_for("int8")
    with pytest.raises(ValueError, match="nvfp4"):
        load_hardware("mi355x").peak_flops_for("nvfp4")


@pytest.mark.parametrize(
    ("family", "precisions"),
    [
        ("ampere", {"bf16", "fp16"}),
        ("hopper", {"bf16", "fp16", "fp8", "fp8-blockwise"}),
        ("blackwell", {"bf16", "fp16", "fp8", "fp8-blockwise", "mxfp8", "nvfp4"}),
        ("blackwell-ultra", {"bf16", "fp16", "fp8", "fp8-blockwise", "mxfp8", "nvfp4"}),
        ("cdna3", {"bf16", "fp16", "fp8", "fp8-blockwise"}),
        ("cdna4", {"bf16", "fp16", "fp8", "fp8-blockwise", "mxfp8"}),
    ],
)
def test_supported_precisions_by_family(family: str, precisions: set[str]) -> None:
    members = [spec for spec in list_hardware() if spec.family == family]
    assert members
    for spec in members:
        assert set(spec.supported_precisions) == precisions, spec.id


@pytest.mark.parametrize("spec", list_hardware(), ids=lambda spec: spec.id)
def test_fabric_follows_vendor(spec: HardwareSpec) -> None:
    expected = {"amd": "xgmi-mesh", "nvidia": "nvswitch"}[spec.vendor]
    assert spec.scale_up_fabric == expected


@pytest.mark.parametrize("hardware_id", ["gb200", "gb300"])
def test_nvl72_is_one_scale_up_domain_of_4_gpu_trays(hardware_id: str) -> None:
    spec = load_hardware(hardware_id)
    assert spec.scale_up_domain_gpus == 72
    assert spec.gpus_per_node == 4
    assert spec.nics_per_node == 4


@pytest.mark.parametrize("spec", list_hardware(), ids=lambda spec: spec.id)
def test_node_shape_is_consistent(spec: HardwareSpec) -> None:
    assert spec.scale_up_domain_gpus % spec.gpus_per_node == 0
    assert spec.hbm_capacity_bytes > 0
    assert spec.hbm_bandwidth_bytes_per_s > 0


def test_units_are_converted_once_to_base_units() -> None:
    # H100 SXM datasheet: 989.4 TFLOP/s dense BF16, 3.35 TB/s, NVLink4 900 GB/s bidirectional;
    # DGX H100: 400 Gb/s NICs; 79.1 GiB as CUDA reports it (catalog file).
    spec = load_hardware("h100-sxm")
    assert spec.peak_flops_for("bf16") == pytest.approx(989.4e12)
    assert spec.hbm_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert spec.scale_up_bytes_per_s == pytest.approx(450e9)
    assert spec.nic_bytes_per_s == pytest.approx(50e9)
    assert spec.hbm_capacity_bytes == pytest.approx(79.1 * 2**30)


def test_specs_are_frozen() -> None:
    spec = load_hardware("mi300x")
    with pytest.raises(ValueError, match="frozen"):
        spec.tdp_w = 1.0  # type: ignore[misc]


def test_specs_can_key_a_cache() -> None:
    spec = load_hardware("h100-sxm")
    assert {spec: "cached"}[load_hardware("H100")] == "cached"
