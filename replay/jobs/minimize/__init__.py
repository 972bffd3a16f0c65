"""`golden minimize`: a failing replay in, the smallest repro out (docs/minimize.md).

session (`minimize_golden`, the library call: one server, each candidate judged by a replay),
search (the reduction alone, over plain predicates), output (the --out directory, published whole
or not at all), repro_script (the shell words of repro.sh, and the matrix's rerun line).
"""
