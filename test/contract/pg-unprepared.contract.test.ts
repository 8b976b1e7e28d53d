import { pgTarget } from '../support/postgres-targets.js';
import { describeStoreContract } from './suite.js';

await describeStoreContract(pgTarget({ preparedStatements: false }));
