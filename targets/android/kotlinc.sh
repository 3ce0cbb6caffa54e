# Sourced by kotlin-check.sh and build-aar.sh (from the repository root): finds kotlinc and the
# Kotlin stdlib jar and sets $kotlinc and $kotlin_stdlib. kotlinc comes from PATH, else the npm
# package kotlin-compiler (pinned: KOTLIN_VERSION), installed with npm into KESTREL_TOOLS_DIR
# (default ~/.cache/kestrel-tools) when missing. A missing JDK or npm is installed with apt-get
# when running as root; otherwise, or when an install fails, it calls `fail` (the caller's).
KOTLIN_VERSION=2.4.20
kestrel_tools="${KESTREL_TOOLS_DIR:-$HOME/.cache/kestrel-tools}"
apt_install() {
    [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null || fail "$1 is missing (install it: $2)"
    echo "kotlinc.sh: installing $2 with apt-get"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $2 >/dev/null ||
        fail "apt-get install $2 failed"
}
command -v javac >/dev/null || apt_install javac openjdk-17-jdk-headless
kotlinc=$(command -v kotlinc || true)
if [[ -z "$kotlinc" ]]; then
    prefix="$kestrel_tools/kotlin-compiler-$KOTLIN_VERSION"
    kotlinc="$prefix/node_modules/kotlin-compiler/bin/kotlinc"
    if [[ ! -x "$kotlinc" ]]; then
        command -v npm >/dev/null || apt_install npm npm
        echo "kotlinc.sh: installing kotlinc $KOTLIN_VERSION (npm package kotlin-compiler) into $prefix"
        mkdir -p "$prefix"
        npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "kotlin-compiler@$KOTLIN_VERSION" ||
            fail "npm install kotlin-compiler@$KOTLIN_VERSION failed"
        [[ -x "$kotlinc" ]] || fail "the kotlin-compiler package has no bin/kotlinc"
    fi
fi
kotlin_home="$(cd "$(dirname "$kotlinc")/.." && pwd)"
kotlin_stdlib="$kotlin_home/lib/kotlin-stdlib.jar"
[[ -f "$kotlin_stdlib" ]] || fail "no kotlin-stdlib.jar in $kotlin_home/lib"
