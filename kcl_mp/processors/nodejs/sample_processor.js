#!/usr/bin/env node
/*
 * A ready-made record processor written with the published aws-kcl library (npm), unchanged
 * from what runs under the Java MultiLangDaemon: it counts records per partition key and
 * checkpoints after every batch, and at shard end. A checkpoint refused because the lease
 * moved (ShutdownException) ends the attempt; throttling is retried a few times.
 *
 * Run it under kcl-mp with `executableName = node processors/nodejs/sample_processor.js`
 * after `npm ci --prefix processors/nodejs`.
 */
'use strict';

const kcl = require('aws-kcl');

const RETRYABLE = new Set(['ThrottlingException', 'KinesisClientLibDependencyException']);

function log(shard, message) {
  process.stderr.write(`sample_processor.js ${shard}: ${message}\n`);
}

function checkpoint(checkpointer, sequenceNumber, shard, done, attempt = 0) {
  const finish = (err) => {
    if (err && RETRYABLE.has(String(err)) && attempt < 4) {
      setTimeout(() => checkpoint(checkpointer, sequenceNumber, shard, done, attempt + 1), 200 * (attempt + 1));
      return;
    }
    if (err) {
      log(shard, `checkpoint not made: ${err}`);
    }
    done();
  };
  if (sequenceNumber === null) {
    checkpointer.checkpoint(finish);
  } else {
    checkpointer.checkpoint(sequenceNumber, finish);
  }
}

function processor() {
  let shard = '-';
  let total = 0;
  let bytes = 0;
  const perKey = new Map();
  return {
    initialize(input, completeCallback) {
      // kcl-mp tells a multi-stream application's processor its stream (aws-kcl passes the key on).
      shard = input.streamName ? `${input.streamName}/${input.shardId}` : input.shardId;
      log(shard, 'starting');
      completeCallback();
    },
    processRecords(input, completeCallback) {
      const records = (input && input.records) || [];
      for (const record of records) {
        bytes += Buffer.from(record.data, 'base64').length;
        perKey.set(record.partitionKey, (perKey.get(record.partitionKey) || 0) + 1);
      }
      total += records.length;
      if (records.length === 0) {
        completeCallback();
        return;
      }
      checkpoint(input.checkpointer, records[records.length - 1].sequenceNumber, shard, completeCallback);
    },
    leaseLost(input, completeCallback) {
      log(shard, `lease lost after ${total} records`);
      completeCallback();
    },
    shardEnded(input, completeCallback) {
      log(shard, `shard ended after ${total} records`);
      checkpoint(input.checkpointer, null, shard, completeCallback);
    },
    shutdownRequested(input, completeCallback) {
      log(shard, `shutting down after ${total} records (${bytes} bytes) over ${perKey.size} keys`);
      checkpoint(input.checkpointer, null, shard, completeCallback);
    },
  };
}

kcl(processor()).run();
