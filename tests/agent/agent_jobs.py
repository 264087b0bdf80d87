"""Small tuning requests shared by the agent tests (their constrained searches take about a second).

A plain module, not ``conftest``: importing ``conftest`` by name picks whichever folder's conftest
was loaded first, so it breaks when tests of several folders run together.
"""

SMALL = "tune llama3 8b on 4 h100 with gbs 64, precision=bf16, zero=1, mbs<=2"
SMALL_8 = "tune llama3 8b on 8 h100 with gbs 64, precision=bf16, zero=1, mbs<=2"
