"""The one reader per quantity (projection/quantities.py): a table of forms people write and what they mean."""

from __future__ import annotations

import pytest

from projection.quantities import QuantityError, read_count, read_rate, read_size

SIZES = [("8192", 8192), ("8,192", 8192), ("8 192", 8192), ("8_192", 8192), ("1,048,576", 1048576), ("1e3", 1000),
         ("8.192e3", 8192), ("2^13", 8192), ("2**13", 8192), ("8k", 8192), ("8K", 8192), ("64k", 65536),
         ("1M", 1048576), ("1.5k", 1536), (" 12 ", 12), (4096, 4096), (4096.0, 4096)]
REFUSED = ["8.5", "-64", "+8", "NaN", "nan", "inf", "-inf", "0x40", "0b11", "٣", "①", "²", "1" * 5000, "8kk",
           "0512", "1,00", "8,19,2", "1,024 000", "", "x", "$TP", "1.2.3", "2^99", "1e99", True, None, [8], 10 ** 30,
           float("nan"), float("inf"), 2.5, "8 k k"]


@pytest.mark.parametrize(("text", "value"), SIZES)
def test_size_forms_mean_what_people_mean(text: object, value: int) -> None:
    assert read_size(text, "seq_len", high=10 ** 9) == value


@pytest.mark.parametrize("text", REFUSED)
def test_other_forms_are_refused_in_one_line(text: object) -> None:
    with pytest.raises(QuantityError) as err:
        read_size(text, "seq_len", high=10 ** 9)
    message = str(err.value)
    assert message.startswith("seq_len: ") and "\n" not in message and len(message) < 200


def test_counts_take_no_suffix_and_keep_their_range() -> None:
    assert read_count("1,024", "gbs") == 1024
    assert read_count(8, "tp", high=8) == 8
    for bad in ("8k", "0", "9"):
        with pytest.raises(QuantityError):
            read_count(bad, "tp", high=8)
    assert read_size("8k", "tokens", decimal=True) == 8000


def test_rates_refuse_denormal_and_non_finite_values() -> None:
    assert read_rate("400", "nic_gbps", low=1e-3, high=1e5) == 400.0
    assert read_rate(12.5, "nic_gbps", low=1e-3, high=1e5) == 12.5
    for bad in (1e-310, 0.0, float("inf"), "nan", "1e6"):
        with pytest.raises(QuantityError):
            read_rate(bad, "nic_gbps", low=1e-3, high=1e5)


def test_a_count_with_too_many_digits_is_too_large_not_not_a_number() -> None:
    """`--gpus 99999999999999999999` said "is not a number (write e.g. 8192, ...)": it is one, only too large."""
    from projection.quantities import QuantityError, read_count, read_size

    for read in (read_size, read_count):
        with pytest.raises(QuantityError, match=r"^--gpus: '99999999999999999999' is too large \(more than 15 digits\)$"):
            read("99999999999999999999", "--gpus")
