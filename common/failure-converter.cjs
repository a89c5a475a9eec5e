/**
 * The failure converter of every Steward client, worker and workflow bundle: a failure's
 * message and stack trace travel as an encoded attributes payload ("Encoded failure" is all
 * that stays readable), so the payload codec encrypts them like any other payload. CommonJS
 * because the worker loads it with require() (`failureConverterPath`) and the workflow
 * bundler bundles it.
 */
'use strict';
const { DefaultFailureConverter } = require('@temporalio/common');

exports.failureConverter = new DefaultFailureConverter({ encodeCommonAttributes: true });
