import { drizzlePgTarget } from '../support/driver-targets.js';
import { describeStoreContract } from './suite.js';

await describeStoreContract(drizzlePgTarget());
