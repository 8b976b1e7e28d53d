import { memoryTarget } from '../support/memory-target.js';
import { describeStoreContract } from './suite.js';

await describeStoreContract(memoryTarget);
