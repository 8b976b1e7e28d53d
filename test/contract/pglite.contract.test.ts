import { pgliteTarget } from '../support/postgres-targets.js';
import { describeStoreContract } from './suite.js';

await describeStoreContract(pgliteTarget());
