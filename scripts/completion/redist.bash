# bash completion for redist and cudnn-fetch.
#
# Install: `cmake --install` puts it in <prefix>/share/bash-completion/completions/
#   as redist and as cudnn-fetch (bash-completion loads it lazily by command
#   name); or source this file from ~/.bashrc.
# Needs bash >= 4 (mapfile); works without the bash-completion package.
#
# Keep in sync with the tools' --help: tests/e2e/test_env.py checks that every
# subcommand and option the tools print is offered here.

_redist_products="cudnn cuda cublasmp cudss cuquantum cusolvermp cusparselt cutensor nppplus nvcomp nvjpeg2000 nvpl nvtiff tensorrt"
_redist_platforms="linux-x86_64 linux-sbsa linux-aarch64 linux-ppc64le windows-x86_64 windows-arm64 source"
_redist_formats="sh fish cmake json github"
_redist_subcommands="versions show fetch verify list remove lock cache env mirror check sbom diff outdated init sync"

_redist_source_opts="--base-url --manifest --manifest-sha256 --ca-file --mirror --cache-dir --no-cache --shared-cache --offline --retries --stall-timeout"
# sync takes its releases from redist.toml: no --manifest, --manifest-sha256.
_redist_sync_source_opts="--base-url --ca-file --mirror --cache-dir --no-cache --shared-cache --offline --retries --stall-timeout"
_redist_select_opts="--platform --cuda --component"
_redist_install_opts="--reinstall --overwrite --force --dry-run --strict --link-mode --jobs -j --max-expansion --max-memory --threads --connections --no-recompressed --profile --json --quiet -q"
_redist_fetch_opts="--prefix $_redist_source_opts --trusted-key $_redist_select_opts --all --locked $_redist_install_opts --check --no-check --with-deps --deps-cuda-version"

# Options of each subcommand (and of cudnn-fetch).
_redist_opts_for() {
    case $1 in
        versions) echo "$_redist_source_opts --json --quiet -q --help -h" ;;
        show) echo "$_redist_source_opts $_redist_select_opts --json --quiet -q --help -h" ;;
        fetch) echo "$_redist_fetch_opts --help -h" ;;
        cudnn-fetch) echo "$_redist_fetch_opts --help -h --version" ;;
        verify) echo "--prefix --json --quiet -q --threads --help -h" ;;
        list) echo "--prefix --file --json --quiet -q --help -h" ;;
        remove) echo "--prefix --product --component --quiet -q --json --help -h" ;;
        lock) echo "$_redist_source_opts --trusted-key $_redist_select_opts --output -o --file --lock-file --upgrade --product --strict --json --quiet -q --help -h" ;;
        cache) echo "--cache-dir --older-than --max-size --dry-run --json --quiet -q --shared-cache --help -h" ;;
        env) echo "--prefix --file --format --json --quiet -q --help -h" ;;
        check) echo "--prefix --component --gpu --quick --json --strict --quiet -q --timeout --compute-capability --help -h" ;;
        mirror) echo "--dest --from-lock --platform --cuda --component --base-url --ca-file --mirror --from-cache --cache-dir --jobs -j --retries --stall-timeout --to --recompress --sign-key --mount-from --json --quiet -q --help -h" ;;
        sbom) echo "--prefix --format --output -o --no-license-lookup $_redist_source_opts --json --quiet -q --help -h" ;;
        diff) echo "$_redist_source_opts --json --quiet -q --help -h" ;;
        outdated) echo "--prefix --file $_redist_source_opts --json --quiet -q --help -h" ;;
        init) echo "--file --platform --force --check --json --quiet -q --help -h" ;;
        sync) echo "--file --lock-file --upgrade --product --platform --exclude --locked --frozen --keep-unlisted --prefix --allow-outside-prefix $_redist_install_opts $_redist_sync_source_opts --trusted-key --help -h" ;;
        *) echo "--help -h --version" ;;
    esac
}

# Options that take a value (the next word, or --opt=value).
_redist_takes_value() {
    case $1 in
        --prefix | --dest | --cache-dir | --manifest | --manifest-sha256 | --locked | --output | -o | --ca-file | --base-url | --mirror | --platform | --cuda | \
            --component | --format | --file | --retries | --stall-timeout | --older-than | --jobs | -j | --link-mode | --max-expansion | --timeout | --max-memory | --threads | --max-size | --lock-file | --exclude | --connections | --product | --to | --recompress | --mount-from | --trusted-key | --sign-key | --from-lock | --compute-capability)
            return 0 ;;
    esac
    return 1
}

# Completes the value of option $1 from prefix $2 into COMPREPLY.
_redist_complete_value() {
    case $1 in
        --platform) mapfile -t COMPREPLY < <(compgen -W "$_redist_platforms" -- "$2") ;;
        --format)
            if [[ $_redist_sub == sbom ]]; then
                mapfile -t COMPREPLY < <(compgen -W "spdx-json cyclonedx-json" -- "$2")
            else
                mapfile -t COMPREPLY < <(compgen -W "$_redist_formats" -- "$2")
            fi ;;
        --cuda) mapfile -t COMPREPLY < <(compgen -W "11 12 13" -- "$2") ;;
        --link-mode) mapfile -t COMPREPLY < <(compgen -W "auto reflink copy hardlink" -- "$2") ;;
        --recompress) mapfile -t COMPREPLY < <(compgen -W "zstd" -- "$2") ;;
        --prefix | --dest | --cache-dir)
            compopt -o filenames 2>/dev/null
            mapfile -t COMPREPLY < <(compgen -d -- "$2") ;;
        --manifest | --ca-file | --locked | --output | -o | --file | --trusted-key | --sign-key | --from-lock)
            compopt -o filenames 2>/dev/null
            mapfile -t COMPREPLY < <(compgen -f -- "$2") ;;
        *) COMPREPLY=() ;;  # free-form: URLs, numbers, component names
    esac
}

_redist() {
    local cword=$COMP_CWORD
    local cur=${COMP_WORDS[cword]}
    local prev=""
    ((cword >= 1)) && prev=${COMP_WORDS[cword - 1]}
    COMPREPLY=()

    # bash splits "--opt=value" at '=' (COMP_WORDBREAKS): "--opt" "=" "value".
    if [[ $cur == "=" ]]; then
        _redist_takes_value "$prev" && _redist_complete_value "$prev" ""
        return 0
    fi
    if [[ $prev == "=" ]] && ((cword >= 2)); then
        _redist_takes_value "${COMP_WORDS[cword - 2]}" && _redist_complete_value "${COMP_WORDS[cword - 2]}" "$cur"
        return 0
    fi

    # Find the subcommand and count the positionals before the cursor.
    local sub="" npos=0 i w skip=0
    [[ ${COMP_WORDS[0]##*/} == cudnn-fetch ]] && sub=cudnn-fetch
    for ((i = 1; i < cword; i++)); do
        w=${COMP_WORDS[i]}
        if ((skip)); then skip=0; continue; fi
        [[ $w == "=" ]] && { skip=1; continue; }
        case $w in
            -*) _redist_takes_value "$w" && [[ ${COMP_WORDS[i + 1]} != "=" ]] && skip=1 ;;
            *) if [[ -z $sub ]]; then sub=$w; else npos=$((npos + 1)); fi ;;
        esac
    done

    _redist_sub=$sub  # for values that depend on the subcommand (--format)
    if [[ $cur == -* ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$(_redist_opts_for "$sub")" -- "$cur")
        return 0
    fi
    if _redist_takes_value "$prev"; then
        _redist_complete_value "$prev" "$cur"
        return 0
    fi
    if [[ -z $sub ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$_redist_subcommands" -- "$cur")
        return 0
    fi
    case $sub in
        versions | show | fetch | lock | mirror | diff)
            ((npos == 0)) && mapfile -t COMPREPLY < <(compgen -W "$_redist_products" -- "$cur") ;;
        cache)
            ((npos == 0)) && mapfile -t COMPREPLY < <(compgen -W "list prune dir" -- "$cur") ;;
    esac
    return 0
}

complete -F _redist redist cudnn-fetch
