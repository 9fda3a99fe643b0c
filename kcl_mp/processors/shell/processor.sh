#!/bin/sh
# A record processor in POSIX shell and jq: no KCL library at all, just the multilang
# protocol (multilang/PROTOCOL.md), to show that any executable works under kcl-mp.
#
# jq reads the daemon's JSON lines (a processRecords line can be 14 MB; the shell's `read`
# would take it a byte at a time) and turns each into one short line of words; the shell
# answers on stdout. It counts records, checkpoints the last record of every batch, and
# checkpoints at shard end and on shutdownRequested. Its log goes to stderr.
#
#     executableName = sh processors/shell/processor.sh
set -eu

shard=-
total=0

say() { printf '%s\n' "$1"; }
log() { printf 'processor.sh %s: %s\n' "$shard" "$1" >&2; }

# checkpoint SEQUENCE SUB: ask, then read the daemon's reply (the next line jq gives us)
checkpoint() {
    if [ "$1" = "-" ]; then
        say '{"action":"checkpoint","sequenceNumber":null}'
    else
        say "{\"action\":\"checkpoint\",\"sequenceNumber\":\"$1\",\"subSequenceNumber\":$2}"
    fi
    read -r reply error || exit 1
    if [ "$reply" != "checkpoint" ]; then
        log "expected the checkpoint reply, got: $reply"
        exit 1
    fi
    if [ "$error" != "-" ]; then
        log "checkpoint at $1 not made: $error"
    fi
}

jq --unbuffered -r '
    if .action == "initialize" then "initialize \(.shardId) \(.sequenceNumber // "-")"
    elif .action == "processRecords" then
        "processRecords \(.records | length) \(.records[-1].sequenceNumber // "-") \(.records[-1].subSequenceNumber // 0)"
    elif .action == "checkpoint" then "checkpoint \(.error // "-")"
    else .action end' | {
    while read -r action a b c; do
        case "$action" in
            initialize)
                shard=$a
                log "starting at $b" ;;
            processRecords)
                total=$((total + a))
                if [ "$a" -gt 0 ]; then checkpoint "$b" "$c"; fi ;;
            shardEnded)
                log "shard ended after $total records"
                checkpoint - - ;;
            shutdownRequested)
                log "shutting down after $total records"
                checkpoint - - ;;
            leaseLost)
                log "lease lost after $total records" ;;
            *)
                log "unknown action: $action"
                exit 1 ;;
        esac
        say "{\"action\":\"status\",\"responseFor\":\"$action\"}"
    done
}
