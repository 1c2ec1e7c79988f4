"""benchmarks/suite_durations.py: the per-file sums it prints are the junit file's, and a file it
cannot read is one line and exit status 1."""
import subprocess
import sys

from benchmarks import suite_durations
from tests.conftest import REPO

JUNIT = """<testsuites><testsuite>
<testcase classname="tests.test_a" name="test_one" time="2.5">
  <properties><property name="child_cpu_s" value="1.25"/></properties></testcase>
<testcase classname="tests.test_a" name="test_two" time="0.5"/>
<testcase classname="tests.test_b" name="test_three" time="4.0"/>
</testsuite></testsuites>"""


def test_files_sum_their_tests_and_children(tmp_path):
    path = tmp_path / "run.xml"
    path.write_text(JUNIT)
    rows = suite_durations.file_table(suite_durations.read_junit(str(path)), None)
    assert rows == [["tests.test_b", 1, 4.0, 0.0], ["tests.test_a", 2, 3.0, 1.2], ["(all)", 3, 7.0, 1.2]]


def test_before_columns_line_up_by_file(tmp_path):
    now, old = tmp_path / "now.xml", tmp_path / "old.xml"
    now.write_text(JUNIT)
    old.write_text(JUNIT.replace('time="4.0"', 'time="9.0"'))
    rows = suite_durations.file_table(suite_durations.read_junit(str(now)), suite_durations.read_junit(str(old)))
    assert rows[0] == ["tests.test_b", 1, 4.0, 0.0, 1, 9.0]
    slow = suite_durations.slowest(suite_durations.read_junit(str(now)), 1, suite_durations.read_junit(str(old)))
    assert slow == [["tests.test_b::test_three", 4.0, 0.0, 9.0]]


def test_a_file_that_is_not_junit_is_one_line(tmp_path):
    path = tmp_path / "broken.xml"
    path.write_text("<testsuites><testcase")
    done = subprocess.run([sys.executable, "benchmarks/suite_durations.py", str(path)], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 1
    assert done.stderr.startswith("suite_durations: cannot read") and done.stderr.count("\n") == 1
