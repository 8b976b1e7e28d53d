import { drizzlePgliteTarget } from '../support/driver-targets.js';
import { describeStoreContract } from './suite.js';

await describeStoreContract(drizzlePgliteTarget());
