#!/bin/bash
# Mutation testing: applies each deliberate bug under test/mutants/ to a temporary copy of the
# tree, builds what its commands need, and runs the commands that mutant names; a mutant is killed
# when one of them fails (the first failure stops it, unless the kill is weak). Prints one line
# per mutant as it ends, with its kill strength (how many tests failed; for a simulation, the
# fraction of make test's seeds of that scenario that fail under the mutant), then the time the
# run took and last "N killed, M survived, W weak". The working tree is never modified, except
# that a whole run writes its summary into test/mutants/README.md. Usage:
#   scripts/mutants.sh [NAME...]        (default: every test/mutants/*.patch, a whole run)
#   scripts/mutants.sh --sample N [--seed S]
#                                       N mutants drawn at random (the seed is printed)
#   scripts/mutants.sh --list ...      prints the mutants that would run, and runs nothing
#   scripts/mutants.sh --baseline [--skip-covered]
#                                       builds the copy as for a whole run and runs every distinct
#                                       Kill: command once without mutation; "N passed, M failed".
#                                       --skip-covered (make test): not what make test runs itself
#                                       where the copy cannot change the result (its simulations
#                                       with as many seeds, its test executables and scripts that
#                                       find nothing through _build that the copy lacks)
# The copy is built as `make mutants` builds it: only the binaries, the test executables that
# the commands name and what their dune stanzas declare in (deps ...). Mutants run in
# MUTANTS_JOBS lanes (default 2), each in a copy of its own; two lanes never run commands of the
# same program at once. Dune's cache (private to the run) serves every build after the first.
# Environment: MUTANTS_TIMEOUT (seconds per command, default 600, 1800 with --baseline; or three
# times the command's time without mutation in the same run, if longer; a command that runs out
# of time counts as a kill, "timeout" in its line: the bug made it hang, but the kill is weak),
# MUTANTS_STRENGTH_SEEDS (default 100: the seeds a simulation's kill strength counts), MUTANTS_JOBS,
# MUTANTS_SEED (as --seed), MUTANTS_VERBOSE=1 (say which command killed each mutant, and the
# tail of a failed build), MUTANTS_NO_BASELINE=1 (skip checking that the commands pass without
# mutation).
set -u
# The whole script is one block, read before it runs: editing this file during a long run
# does not change the run.
{
src=$(cd "$(dirname "$0")/.." && pwd)
dir=$src/test/mutants
timeout_s=${MUTANTS_TIMEOUT:-}
verbose=${MUTANTS_VERBOSE:-0}
jobs=${MUTANTS_JOBS:-2}
strength_seeds=${MUTANTS_STRENGTH_SEEDS:-100}
seed=${MUTANTS_SEED:-}
DUNE=${DUNE:-dune}
mode=run
skip_covered=0
sample=""
names=()

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() {
  echo "mutants: $*" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case $1 in
    --baseline) mode=baseline ;;
    --list) mode=list ;;
    --skip-covered) skip_covered=1 ;;
    --sample) [ $# -ge 2 ] || die "--sample needs a number"; sample=$2; shift ;;
    --sample=*) sample=${1#--sample=} ;;
    --seed) [ $# -ge 2 ] || die "--seed needs a number"; seed=$2; shift ;;
    --seed=*) seed=${1#--seed=} ;;
    -h | --help) usage; exit 0 ;;
    -*) die "unknown option $1 (scripts/mutants.sh --help)" ;;
    *) names+=("${1%.patch}") ;;
  esac
  shift
done
# --baseline (make test, beside the other suites) waits longer: a command that passes ends
# well within it on a loaded machine, only a wedged one reaches it.
[ -n "$timeout_s" ] || { [ "$mode" = baseline ] && timeout_s=1800 || timeout_s=600; }
is_count() { [[ $1 =~ ^[0-9]+$ ]] && [ "${#1}" -le 6 ] && [ "$1" -gt 0 ]; }
is_count "$timeout_s" || die "MUTANTS_TIMEOUT must be a positive number of seconds, not '$timeout_s'"
is_count "$strength_seeds" || die "MUTANTS_STRENGTH_SEEDS must be a positive number, not '$strength_seeds'"
is_count "$jobs" && [ "$jobs" -le 8 ] || die "MUTANTS_JOBS must be from 1 to 8, not '$jobs'"
[ -z "$sample" ] || is_count "$sample" || die "--sample needs a positive number, not '$sample'"
[ -z "$seed" ] || [[ $seed =~ ^[0-9]{1,9}$ ]] || die "the seed must be a number (at most 9 digits), not '$seed'"
[ -n "$sample" ] && [ ${#names[@]} -gt 0 ] && die "--sample draws the mutants: name none"
[ "$mode" = baseline ] && { [ -n "$sample" ] || [ ${#names[@]} -gt 0 ]; } && die "--baseline checks every mutant's commands: name none"
for t in git flock timeout realpath "$DUNE"; do
  command -v "$t" >/dev/null || die "$t is not installed"
done

shopt -s nullglob
all=("$dir"/*.patch)
shopt -u nullglob
[ ${#all[@]} -gt 0 ] || die "no mutant in $dir"
whole=0
if [ ${#names[@]} -gt 0 ]; then
  patches=()
  for n in "${names[@]}"; do
    [ -f "$dir/$n.patch" ] || die "no mutant $n (no $dir/$n.patch)"
    patches+=("$dir/$n.patch")
  done
elif [ -n "$sample" ]; then
  [ -n "$seed" ] || seed=$(($(od -An -N3 -tu4 /dev/urandom) % 1000000))
  [ "$sample" -le ${#all[@]} ] || sample=${#all[@]}
  mapfile -t patches < <(printf '%s\n' "${all[@]}" |
    awk -v s="$seed" 'BEGIN { srand(s) } { printf "%.9f\t%s\n", rand(), $0 }' |
    sort -k1,1 | head -n "$sample" | cut -f2 | sort)
  echo "mutants: $sample of ${#all[@]} drawn with seed $seed (scripts/mutants.sh --sample $sample --seed $seed draws them again)"
else
  patches=("${all[@]}")
  [ "$mode" = run ] && whole=1
fi

if [ "$mode" = list ]; then
  for p in "${patches[@]}"; do basename "$p" .patch; done
  exit 0
fi

start_time=$SECONDS
started_at=$(date -u '+%Y-%m-%d %H:%M UTC')
commit=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$(git -C "$src" status --porcelain --untracked-files=no 2>/dev/null)" ] && commit="$commit with uncommitted changes"

tmp=$(mktemp -d /tmp/consort-mutants.XXXXXX)
lane_pids=()
cleanup() {
  local f p
  for f in "$tmp"/lane*.cmd; do [ -f "$f" ] && p=$(cat "$f") && [ -n "$p" ] && kill -TERM "$p" 2>/dev/null; done
  for p in "${lane_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "mutants: interrupted" >&2; exit 130' INT TERM
mkdir -p "$tmp/log" "$tmp/lock" "$tmp/res" "$tmp/cache" "$tmp/time"

# The header of a mutant: "Mutant: ..." (what the bug is) and one or more "Kill: COMMAND" lines,
# before the diff.
kills() { sed -n '/^diff \|^--- /q; s/^Kill: *//p' "$1"; }
describe() { sed -n '/^diff \|^--- /q; s/^Mutant: *//p' "$1" | head -1; }

# The files a dune stanza named NAME declares in its (deps ...), as written there (%{exe:X} and
# %{dep:X} as X); a form such as (glob_files ...) comes out as "?FORM", and is not followed.
deps_awk='
function emit(   n, i, t, depth, indeps, ddepth, out, isname, nd, kw, found) {
  gsub(/\(/, " ( ", buf); gsub(/\)/, " ) ", buf)
  n = split(buf, tok, /[ \t]+/)
  depth = 0; indeps = 0; isname = 0; out = ""; found = 0
  for (i = 1; i <= n; i++) {
    t = tok[i]
    if (t == "") continue
    if (t == "(") { depth++; kw = 1; continue }
    if (t == ")") {
      if (indeps && depth == ddepth) indeps = 0
      if (isname && depth == nd) isname = 0
      depth--; kw = 0; continue
    }
    if (kw) {
      kw = 0
      if (depth == 2 && (t == "name" || t == "names")) { isname = 1; nd = depth; continue }
      if (depth == 2 && t == "deps") { indeps = 1; ddepth = depth; continue }
      if (indeps && depth > ddepth) out = out "?" t "\n"
      continue
    }
    if (isname && t == name) found = 1
    if (indeps && depth == ddepth) {
      sub(/^%\{(exe|dep):/, "", t); sub(/\}$/, "", t)
      out = out t "\n"
    }
  }
  if (found) printf "%s", out
  buf = ""
}
/^\(/ { if (buf != "") emit() }
{ sub(/;.*/, ""); buf = buf " " $0 }
END { if (buf != "") emit() }'

# The build targets of some commands (on stdin): the binaries (tests start them), every
# _build/default/....exe a command names, and what the dune stanza of each of those declares in
# its deps, so that a test finds in the copy the files it reads there in make test.
targets_of() {
  echo bin/main.exe
  echo bin/consort-bench
  echo bin/consortd/consortd.exe
  local t d n dep
  grep -Eo '_build/default/[A-Za-z0-9_./-]+\.exe' | sed 's|^_build/default/||' | sort -u |
    while read -r t; do
      echo "$t"
      d=$(dirname "$t")
      n=$(basename "$t" .exe)
      [ -f "$src/$d/dune" ] || continue
      awk -v name="$n" "$deps_awk" "$src/$d/dune" | while read -r dep; do
        case $dep in '?'* | '') continue ;; esac
        dep=$(realpath -m --relative-to="$src" "$src/$d/$dep")
        case $dep in ../* | /*) ;; *) echo "$dep" ;; esac
      done
    done
}

# Dune in copy K, with the run's cache: after the first build, a build of what is already known
# (the targets again, once a mutant is undone) takes its files from the cache.
dune_in() {
  local k=$1
  shift
  (cd "$tmp/tree$k" && DUNE_CACHE=enabled DUNE_CACHE_TRANSPORT=direct XDG_CACHE_HOME=$tmp/cache \
    $DUNE build "$@")
}

# Two lanes never run the same program at once (a test may use fixed names: a socket, a
# namespace); simulations share nothing.
lock_key() {
  local k
  case $1 in "consort sim "*) return ;; "consort "*) echo "consort-$(awk '{print $2}' <<<"$1")"; return ;; esac
  k=$(grep -Eo '_build/default/[A-Za-z0-9_./-]+\.exe' <<<"$1" | tail -1)
  [ -n "$k" ] || k=$(grep -Eo '[A-Za-z0-9_.-]*/[A-Za-z0-9_./-]+' <<<"$1" | head -1)
  [ -n "$k" ] || k=$(awk '{print $1}' <<<"$1")
  echo "${k//\//_}"
}

# Runs a command in copy K; its status (124 or 137: it ran out of time).
run_kill() { # K COMMAND [SECONDS]
  local k=$1 cmd=$2 limit=${3:-$timeout_s} key rc
  key=$(lock_key "$cmd")
  (
    cd "$tmp/tree$k" || exit 2
    export PATH="$tmp/bin$k:$PATH" CONSORT_CHECKED=1 DUNE_CACHE=enabled DUNE_CACHE_TRANSPORT=direct \
      XDG_CACHE_HOME=$tmp/cache
    if [ -n "$key" ]; then exec 9>"$tmp/lock/$key" && flock 9; fi
    # The lock stays with this shell: a process the command leaves behind does not hold it.
    timeout -k 10 "$limit" bash -c "$cmd" </dev/null 9>&- &
    echo $! >"$tmp/lane$k.cmd"
    wait $!
  ) >"$tmp/log/run$k" 2>&1
  rc=$?
  : >"$tmp/lane$k.cmd"
  return $rc
}

# A queue shared by the lanes: lines "KEY<TAB>ITEM", KEY the program of the item's first command
# (lock_key). A lane takes the first item not taken whose program no other lane is running, or
# else the first not taken, so that the lanes seldom wait for each other's lock.
claim() { # K: prints the line number taken, or nothing when the queue is empty
  flock "$tmp/lock/queue" awk -v me="$1" -v dir="$tmp" -v jobs="$jobs" '
    BEGIN {
      for (k = 0; k < jobs; k++) if (k != me) {
        f = dir "/lane" k ".key"; if ((getline l < f) > 0 && l != "") busy[l] = 1; close(f)
      }
      f = dir "/taken"; while ((getline l < f) > 0) taken[l] = 1; close(f)
    }
    FNR in taken { next }
    { key = $0; sub(/\t.*/, "", key); keys[FNR] = key
      if (first == "") first = FNR
      if (pick == "" && (key == "" || !(key in busy))) pick = FNR }
    END {
      if (pick == "") pick = first
      if (pick != "") {
        print pick >> (dir "/taken")
        print keys[pick] > (dir "/lane" me ".key")
        print pick
      }
    }' "$tmp/queue"
}
run_lanes() { # FUNCTION: FUNCTION K ITEM for every line of $tmp/queue, in $jobs lanes
  local f=$1 k
  : >"$tmp/taken"
  lane_pids=()
  for ((k = 0; k < jobs; k++)); do
    (
      while :; do
        i=$(claim "$k")
        [ -n "$i" ] || break
        line=$(sed -n "${i}p" "$tmp/queue")
        $f "$k" "${line#*$'\t'}"
      done
      : >"$tmp/lane$k.key"
    ) &
    lane_pids+=($!)
  done
  wait "${lane_pids[@]}"
  lane_pids=()
}

mapfile -t kill_cmds < <(for p in "${patches[@]}"; do kills "$p"; done | sort -u)
mapfile -t build_targets < <(printf '%s\n' "${kill_cmds[@]}" | targets_of | sort -u)

# The copies: the tree as it is now (tracked and untracked files, not ignored ones), under git so
# that each mutant can be undone exactly. In kill commands, "consort" is the binary of the copy.
build_start=$SECONDS
mkdir -p "$tmp/tree0"
(cd "$src" && git ls-files -z -c -o --exclude-standard | tar -c --null -T - -f -) | tar -x -C "$tmp/tree0" -f -
git -C "$tmp/tree0" init -q && git -C "$tmp/tree0" add -A &&
  git -C "$tmp/tree0" -c user.name=m -c user.email=m@m commit -qm base || die "cannot make a git copy of the tree in $tmp"
lanes=$jobs
[ "$mode" = run ] && [ ${#patches[@]} -lt "$lanes" ] && lanes=${#patches[@]}
for ((k = 1; k < lanes; k++)); do cp -a "$tmp/tree0" "$tmp/tree$k"; done
for ((k = 0; k < lanes; k++)); do
  mkdir -p "$tmp/bin$k"
  printf '#!/bin/sh\nexec %s/_build/default/bin/main.exe "$@"\n' "$tmp/tree$k" >"$tmp/bin$k/consort"
  chmod +x "$tmp/bin$k/consort"
  if ! dune_in "$k" "${build_targets[@]}" >"$tmp/log/build$k" 2>&1; then
    echo "mutants: the tree does not build without mutation:" >&2
    tail -30 "$tmp/log/build$k" >&2
    exit 2
  fi
done
jobs=$lanes
build_secs=$((SECONDS - build_start))

duration() { printf '%d min %d s' $(($1 / 60)) $(($1 % 60)); }

# Every distinct command passes without mutation, or it cannot tell a mutant.
baseline_one() {
  local k=$1 i=$2 s=$SECONDS rc why="fails"
  run_kill "$k" "${kill_cmds[$i]}"
  rc=$?
  if [ $rc -eq 0 ]; then
    echo "ok $((SECONDS - s))" >"$tmp/res/base$i"
    echo "$((SECONDS - s))" >"$tmp/time/$i"
  else
    echo "FAIL $((SECONDS - s))" >"$tmp/res/base$i"
    case $rc in 124 | 137) why="runs out of time (MUTANTS_TIMEOUT=$timeout_s s; a loaded machine needs more)" ;; esac
    {
      echo "mutants: this command $why without any mutation, so it cannot tell a mutant: ${kill_cmds[$i]}"
      tail -20 "$tmp/log/run$k"
    } | flock "$tmp/lock/out" cat >&2
  fi
  [ "$verbose" = 1 ] && echo "  baseline $((SECONDS - s)) s: ${kill_cmds[$i]}"
}
# A simulation in normal form, "SCENARIO|PARAMS|FIRST SEED|LAST SEED", or nothing.
sim_form() {
  local -a a
  local i sc="" n="" first=1 params=""
  read -r -a a <<<"$1"
  case ${a[0]:-} in consort | */bin/main.exe) ;; *) return ;; esac
  [ "${a[1]:-}" = sim ] || return
  for ((i = 2; i < ${#a[@]}; i++)); do
    case ${a[$i]} in
      --scenario) sc=${a[$((i + 1))]:-}; i=$((i + 1)) ;;
      --seeds) n=${a[$((i + 1))]:-}; i=$((i + 1)) ;;
      --seed) first=${a[$((i + 1))]:-}; i=$((i + 1)) ;;
      --params) params=${a[$((i + 1))]:-}; i=$((i + 1)) ;;
      --quiet) ;;
      *) return ;;
    esac
  done
  [[ $n =~ ^[0-9]+$ && $first =~ ^[0-9]+$ && -n $sc ]] || return
  echo "$sc|$params|$first|$((first + n - 1))"
}
# Whether a program finds files through the build tree (its path, "_build", argv.(0)): in the
# copy, _build holds only what the targeted build made, so its run there may differ from make
# test's. A test executable: the OCaml sources of its directory; a script: the script, and the
# files beside it unless it lives in scripts/ (each script there stands alone). A path under
# _build/default that the script builds itself, or one of the two binaries every copy has, is fine.
reads_build_tree() { # PROGRAM (relative to the tree)
  local p=$1 d f x
  case $p in
    _build/default/*.exe)
      d=$(dirname "${p#_build/default/}")
      grep -qsE 'Sys\.executable_name|_build|argv\.\(0\)' "$src/$d"/*.ml || return 1
      # It does: it is as in make test if every file that a string of its sources names there
      # (from its directory under _build/default, or from the root) and that the whole build
      # (make build, before make test) has, the copy has too, and every directory a path among
      # those strings names holds the same files in both. Without a whole build to compare with,
      # it may read anything.
      [ -x "$src/_build/default/bin/main.exe" ] || return 0
      while read -r x; do
        for f in "$d/$x" "$x"; do
          f=$(realpath -m --relative-to="$src/_build/default" "$src/_build/default/${f#_build/default/}")
          case $f in .. | ../* | /* | .) continue ;; esac
          if [ -d "$src/_build/default/$f" ]; then
            # A directory: only a path ("../../examples/"), not a word ("bench", "/") that happens
            # to name one, nor its own directory (its siblings are named as files).
            case $x in */?* | ?*/*) ;; *) continue ;; esac
            [ "$f" != "$d" ] || continue
            diff -q <(cd "$src/_build/default/$f" && find . ! -type d | sort) \
              <(cd "$tmp/tree0/_build/default/$f" 2>/dev/null && find . ! -type d | sort) >/dev/null || return 0
          elif [ -e "$src/_build/default/$f" ] && [ ! -e "$tmp/tree0/_build/default/$f" ]; then
            return 0
          fi
        done
      done < <(grep -ohsE '"[^"\\ ]+"' "$src/$d"/*.ml | tr -d '"' | sort -u)
      return 1
      ;;
  esac
  [ -f "$src/$p" ] || return 0
  d=$(dirname "$p")
  if [ "$d" = scripts ]; then f=("$src/$p"); else mapfile -t f < <(find "$src/$d" -type f); fi
  grep -qshE '_build/default($|[^/])' "${f[@]}" && return 0
  while read -r x; do
    case $x in bin/main.exe | bin/consort-bench | bin/consortd/consortd.exe) continue ;; esac
    grep -qsE "build +(\./)?$x( |\$)" "$src/$p" || return 0
  done < <(grep -ohsE '_build/default/[A-Za-z0-9_./-]+' "${f[@]}" | sed 's|^_build/default/||' | sort -u)
  return 1
}
# Whether make test runs COMMAND itself, with the same result as in the copy.
make_test_runs() {
  grep -qxF -- "$1" "$tmp/make-test-cmds" || return 1
  ! reads_build_tree "$(awk '{print $1}' <<<"$1")"
}
# Commands that need not run: a test executable's run restricted to some of its tests
# ("EXE test NAME...", after the same "... && " if any) when the same executable runs whole
# among the commands (its tests are
# independent: the whole run holds those); with --skip-covered, a command that make test runs
# itself as one of its suites (a test executable run whole, or a part of it, or a script), when
# the program does not find files through the build tree (above), so that the copy cannot change
# its result: make test proves that it passes; and a simulation that make test runs with the same
# scenario and parameters over the same seeds or more (a simulation reads no file, and each seed
# is deterministic).
covered() {
  local c=$1 f sc params first last g
  if [[ $c =~ ^(.*\ \&\&\ )?(_build/default/[A-Za-z0-9_./-]+\.exe)\ test\  ]] &&
    printf '%s\n' "${kill_cmds[@]}" | grep -qxF "${BASH_REMATCH[1]}${BASH_REMATCH[2]}"; then
    echo "the whole ${BASH_REMATCH[2]##*/}"
    return 0
  fi
  [ "$skip_covered" = 1 ] || return 1
  if [[ $c =~ ^(_build/default/[A-Za-z0-9_./-]+\.exe)(\ test\ .*)?$ ]] && make_test_runs "${BASH_REMATCH[1]}"; then
    echo "make test's ${BASH_REMATCH[1]##*/}"
    return 0
  fi
  if [[ $c =~ ^[A-Za-z0-9_./-]+(\ --?[a-z-]+)*$ ]] && [[ ! $c =~ ^consort\  ]] && make_test_runs "$c"; then
    echo "make test's $c"
    return 0
  fi
  f=$(sim_form "$c")
  [ -n "$f" ] || return 1
  IFS='|' read -r sc params first last <<<"$f"
  while IFS='|' read -r gsc gparams gfirst glast; do
    if [ "$gsc" = "$sc" ] && [ "$gparams" = "$params" ] && [ "$gfirst" -le "$first" ] && [ "$glast" -ge "$last" ]; then
      echo "make test's sim $sc, seeds $gfirst to $glast"
      return 0
    fi
  done <"$tmp/make-test-sims"
  return 1
}
# make test's suites, written as Kill: lines write commands, and its simulations in normal form
# (covered, and the kill strength below).
"$src/scripts/test.sh" --list | sed 's|^\./||; s|^_build/default/bin/main\.exe |consort |' >"$tmp/make-test-cmds"
while read -r c; do sim_form "$c"; done <"$tmp/make-test-cmds" >"$tmp/make-test-sims"
if [ "$mode" = baseline ] || [ "${MUTANTS_NO_BASELINE:-0}" != 1 ]; then
  ncovered=0
  for i in "${!kill_cmds[@]}"; do
    if why=$(covered "${kill_cmds[$i]}"); then
      ncovered=$((ncovered + 1))
      echo "  covered by $why: ${kill_cmds[$i]}" >>"$tmp/covered"
      continue
    fi
    printf '%s\t%s\n' "$(lock_key "${kill_cmds[$i]}")" "$i"
  done >"$tmp/queue"
  run_lanes baseline_one
  [ "$verbose" = 1 ] && [ -f "$tmp/covered" ] && cat "$tmp/covered"
  ran=$(cat "$tmp"/res/base* 2>/dev/null | wc -l)
  bad=$(cat "$tmp"/res/base* 2>/dev/null | grep -c '^FAIL')
  if [ "$mode" = baseline ]; then
    echo "${#kill_cmds[@]} distinct Kill: commands: $ran run once without mutation, $ncovered covered by another run," \
      "in $(duration $((SECONDS - start_time))) (building the copies $(duration "$build_secs"))"
    echo "$((ran - bad)) passed, $bad failed"
    [ "$bad" -eq 0 ]
    exit
  fi
  [ "$bad" -eq 0 ] || die "$bad of ${#kill_cmds[@]} commands fail without mutation (above); no mutant was run"
fi

# A mutant's command may run MUTANTS_TIMEOUT seconds, or three times as long as it took without
# mutation in this run if that is longer: on a loaded machine, a slow test is not a hang.
limit_of() {
  local i t c=$1
  # A part of a test executable's tests: the whole run's time, if it ran.
  [[ $c =~ ^(_build/default/[A-Za-z0-9_./-]+\.exe)\ test\  ]] && [ ! -s "$tmp/time/$(index_of "$c")" ] &&
    c=${BASH_REMATCH[1]}
  for i in "${!kill_cmds[@]}"; do
    if [ "${kill_cmds[$i]}" = "$c" ]; then
      t=$(cat "$tmp/time/$i" 2>/dev/null)
      [ -n "$t" ] && [ $((3 * t)) -gt "$timeout_s" ] && echo $((3 * t)) && return
      break
    fi
  done
  echo "$timeout_s"
}

index_of() {
  local i
  for i in "${!kill_cmds[@]}"; do [ "${kill_cmds[$i]}" = "$1" ] && echo "$i" && return; done
  echo none
}

# Kill strength. A command that failed: how many of its tests failed, from its output (alcotest's
# "K failures! ... N tests run.", or a last "P passed, F failed"). A simulation that killed: the
# fraction of seeds that fail under the mutant, over the first MUTANTS_STRENGTH_SEEDS (default
# 100) seeds of the run of the same scenario and parameters that make test makes (fewer if make
# test runs fewer), ten at a time until 5% of them have failed. A mutant is weak when no command kills it but simulations failing on fewer
# than 5% of those seeds, or simulations that make test does not run, or a timeout (a hang cannot
# be told from a loaded machine): its remaining commands then run too, in case one kills it for
# real.
tests_failed() { # LOG: "K of N tests", or nothing
  local l=$1 run fail
  run=$(grep -aEo '[0-9]+ tests? run' "$l" | tail -1 | grep -Eo '^[0-9]+')
  if [ -n "$run" ]; then
    fail=$(grep -aEo '[0-9]+ failures?!' "$l" | tail -1 | grep -Eo '^[0-9]+')
    echo "${fail:-0} of $run tests"
    return
  fi
  grep -aE '^[0-9]+ passed, [0-9]+ failed' "$l" | tail -1 | awk '{ print $3 " of " $1 + $3 " tests" }'
}
sim_strength() { # K FORM: prints "TEXT" and returns 0 when strong
  local k=$1 sc params first last gsc gparams gfirst glast best="" n l f ran c
  IFS='|' read -r sc params first last <<<"$2"
  while IFS='|' read -r gsc gparams gfirst glast; do
    [ "$gsc" = "$sc" ] && [ "$gparams" = "$params" ] || continue
    [ -z "$best" ] || [ $((glast - gfirst)) -gt $((${best#*|} - ${best%|*})) ] && best="$gfirst|$glast"
  done <"$tmp/make-test-sims"
  if [ -z "$best" ]; then
    echo "sim $sc${params:+ ($params)}: make test does not run it"
    return 1
  fi
  gfirst=${best%|*}
  n=$((${best#*|} - gfirst + 1))
  [ "$n" -le "$strength_seeds" ] || n=$strength_seeds
  # Ten seeds at a time, until 5% of the N have failed (a bug that slows every seed down costs
  # ten seeds, not N) or all N have run.
  f=0 ran=0
  while [ "$ran" -lt "$n" ] && [ $((20 * f)) -lt "$n" ]; do
    c=$((n - ran < 10 ? n - ran : 10))
    run_kill "$k" "consort sim --scenario $sc --seeds $c --seed $((gfirst + ran))${params:+ --params $params} --quiet"
    l=$(grep -aE '^[0-9]+ passed, [0-9]+ failed' "$tmp/log/run$k" | tail -1)
    if [ -z "$l" ]; then
      echo "sim $sc${params:+ ($params)}: seeds $((gfirst + ran)) to $((gfirst + ran + c - 1)) did not run through"
      return 1
    fi
    f=$((f + $(awk '{ print $3 }' <<<"$l")))
    ran=$((ran + c))
  done
  echo "sim $sc${params:+ ($params)}: $f of $ran seeds ($((100 * f / ran))%)$([ "$ran" -lt "$n" ] && echo ", 5% of $n reached")"
  [ $((20 * f)) -ge "$n" ]
}

# One mutant in copy K: apply, build what its commands need, run them until the first kill, undo,
# and build the same targets again (from the cache) so that the copy is the tree's once more.
mutant_one() {
  local k=$1 p=$2 name s=$SECONDS by="" how="" rc cmd line built=0 ran=0 strength="" weak=1 f t
  local -a cmds targets
  name=$(basename "$p" .patch)
  # Dune's cache keeps every mutant's files (a few hundred MB each, at most): stop before the disk
  # is full rather than fail builds.
  if [ "$(df -Pk "$tmp" | awk 'NR == 2 { print $4 }')" -lt $((2 * 1024 * 1024)) ]; then
    echo "mutants: lane $k stops: less than 2 GB free in $tmp" | flock "$tmp/lock/out" cat >&2
    exit 2
  fi
  mapfile -t cmds < <(kills "$p")
  mapfile -t targets < <(printf '%s\n' "${cmds[@]}" | targets_of | sort -u)
  if [ ${#cmds[@]} -eq 0 ]; then
    line="BROKEN $name (no Kill: command)"
  elif ! git -C "$tmp/tree$k" apply "$p" 2>"$tmp/log/apply$k"; then
    line="BROKEN $name (does not apply)"
    [ "$verbose" = 1 ] && line="$line"$'\n'"$(sed 's/^/  /' "$tmp/log/apply$k")"
  elif ! dune_in "$k" "${targets[@]}" >"$tmp/log/build$k" 2>&1; then
    line="BROKEN $name (does not build)"
    [ "$verbose" = 1 ] && line="$line"$'\n'"$(tail -20 "$tmp/log/build$k" | sed 's/^/  /')"
  else
    built=$SECONDS
    # Until the first kill that is not weak (above); the first kill of all is the one named.
    for cmd in "${cmds[@]}"; do
      run_kill "$k" "$cmd" "$(limit_of "$cmd")"
      rc=$?
      [ $rc -eq 0 ] && continue
      if [ -z "$by" ]; then
        by=$cmd
        case $rc in 124 | 137) how=timeout ;; *) how=failed ;; esac
      fi
      case $rc in
        124 | 137) strength="${strength:+$strength; }timeout" ;;
        *)
          f=$(sim_form "$cmd")
          if [ -z "$f" ]; then
            t=$(tests_failed "$tmp/log/run$k")
            strength="${strength:+$strength; }${t:-failed}"
            weak=0
            break
          fi
          t=$(sim_strength "$k" "$f") && weak=0
          strength="${strength:+$strength; }$t"
          [ "$weak" = 0 ] && break
          ;;
      esac
    done
    ran=$SECONDS
    if [ -n "$by" ]; then
      line=$(printf 'killed %-44s %5d s  %-7s %s' "$name" $((SECONDS - s)) "$how" "$strength")
      [ "$weak" = 1 ] && line="$line  WEAK"
      [ "$verbose" = 1 ] && line="$line"$'\n'"  by: $by: $(describe "$p")"
    else
      line=$(printf 'SURVIVED %-42s %5d s' "$name" $((SECONDS - s)))
      [ "$verbose" = 1 ] && line="$line"$'\n'"  $(describe "$p")"
    fi
  fi
  echo "${line%%$'\n'*}" | awk '{print $1}' >"$tmp/res/m-$name"
  [ "$how" = timeout ] && echo timeout >>"$tmp/res/m-$name"
  [ -n "$by" ] && [ "$weak" = 1 ] && echo weak >>"$tmp/res/m-$name"
  echo "$line" | flock "$tmp/lock/out" cat
  git -C "$tmp/tree$k" checkout -q -- . && git -C "$tmp/tree$k" clean -qfdx -e _build
  if ! dune_in "$k" "${targets[@]}" >"$tmp/log/build$k" 2>&1; then
    echo "mutants: lane $k: the tree no longer builds once $name is undone" | flock "$tmp/lock/out" cat >&2
    tail -20 "$tmp/log/build$k" >&2
    exit 2
  fi
  [ "$verbose" = 1 ] && [ "$built" -gt 0 ] &&
    echo "  $name: build $((built - s)) s, commands $((ran - built)) s, undo and rebuild $((SECONDS - ran)) s" |
    flock "$tmp/lock/out" cat
  return 0
}
for p in "${patches[@]}"; do printf '%s\t%s\n' "$(lock_key "$(kills "$p" | head -1)")" "$p"; done >"$tmp/queue"
run_lanes mutant_one

count() { cat "$tmp"/res/m-* 2>/dev/null | grep -c "^$1\$"; }
killed=$(count killed)
survived=$(count SURVIVED)
broken=$(count BROKEN)
timeouts=$(count timeout)
weak=$(count weak)
weak_list=$(grep -lx weak "$tmp"/res/m-* 2>/dev/null | sed 's|.*/m-||' | sort | tr '\n' ' ' | sed 's/ $//')
unrun=$((${#patches[@]} - killed - survived - broken))
elapsed=$((SECONDS - start_time))
[ "$unrun" -gt 0 ] && echo "$unrun not run (a lane stopped)"
[ "$broken" -gt 0 ] && echo "$broken broken (did not apply or build)"
[ "$weak" -gt 0 ] && echo "weak (killed only by simulations failing on fewer than 5% of make test's seeds, by one make test does not run, or by a timeout): $weak_list"
echo "${#patches[@]} mutants in $(duration $elapsed) on $jobs lane$([ "$jobs" -gt 1 ] && echo s) (building the copies $(duration "$build_secs"), MUTANTS_TIMEOUT=$timeout_s, $timeouts first killed by a timeout)"

# A whole run records its summary in the README (the line after the marker).
if [ "$whole" = 1 ] && [ "$unrun" -eq 0 ]; then
  summary="$started_at, commit $commit: $killed killed, $survived survived, $weak weak"
  [ "$broken" -gt 0 ] && summary="$summary, $broken broken"
  summary="$summary; $(duration $elapsed) on $jobs lane$([ "$jobs" -gt 1 ] && echo s); weak: ${weak_list:-none}."
  readme=$dir/README.md
  if grep -q '^<!-- last whole run -->$' "$readme"; then
    awk -v s="$summary" 'skip { skip = 0; print s; next } { print } /^<!-- last whole run -->$/ { skip = 1 }' \
      "$readme" >"$tmp/readme" && cat "$tmp/readme" >"$readme" && echo "mutants: recorded in $readme: $summary"
  else
    echo "mutants: $readme has no line '<!-- last whole run -->': the summary is not recorded" >&2
  fi
fi
echo "$killed killed, $survived survived, $weak weak"
[ "$survived" -eq 0 ] && [ "$broken" -eq 0 ] && [ "$unrun" -eq 0 ] && [ "$weak" -eq 0 ]
exit
}
